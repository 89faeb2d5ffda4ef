import Foundation
import VaultCrypto

/// The hash chain of the audit log (Docs/design.md §6): each entry's hash covers its fields and the previous
/// entry's hash, so editing, deleting or reordering any entry breaks every hash after it.
public enum AuditChain {
    /// The `previousHash` of the first entry: 32 zero bytes, hex.
    public static let genesis = String(repeating: "0", count: 64)

    /// The hash (hex) of one entry given the previous entry's hash (hex).
    public static func hash(
        sequence: UInt64,
        at: UnixMillis,
        actor: String,
        action: String,
        patientID: UUID?,
        details: [String: String],
        previousHash: String
    ) -> String {
        var w = CanonicalWriter(domain: "CareVault-audit-v1")
        w.append(sequence)
        w.append(at)
        w.append(actor)
        w.append(action)
        w.append(patientID.map { $0.uuidString.lowercased() })
        let keys = details.keys.sorted()
        w.append(UInt32(keys.count))
        for k in keys {
            w.append(k)
            w.append(details[k]!)
        }
        w.append(previousHash)
        return Hex.encode(try! BLAKE2b.hash(w.bytes))
    }
}
