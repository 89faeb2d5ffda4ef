import Foundation
import VaultCrypto

/// The hash chain of the audit log (Docs/design.md §6): each entry's hash covers its fields and the previous
/// entry's hash, so editing, deleting or reordering any entry breaks every hash after it.
public enum AuditChain {
    /// The `previousHash` of the first entry: 32 zero bytes, hex.
    public static let genesis = String(repeating: "0", count: 64)

    /// The hash (hex) of one entry, covering its fields and the previous entry's hash (hex).
    public static func hash(of entry: some AuditChainEntry) -> String {
        var w = CanonicalWriter(domain: "CareVault-audit-v1")
        w.append(entry.sequence)
        w.append(entry.at)
        w.append(entry.actor)
        w.append(entry.action)
        w.append(entry.patientID.map { $0.uuidString.lowercased() })
        let keys = entry.details.keys.sorted()
        w.append(UInt32(keys.count))
        for k in keys {
            w.append(k)
            w.append(entry.details[k]!)
        }
        w.append(entry.previousHash)
        return Hex.encode(try! BLAKE2b.hash(w.bytes))
    }
}

/// What an audit entry's hash covers: its fields and the hash of the entry before it. The wire type
/// `AuditEntry` conforms, so the server that writes the chain and whoever verifies it hash the same fields.
public protocol AuditChainEntry {
    /// The entry's position, counted from 1.
    var sequence: UInt64 { get }
    /// When it was written, in Unix milliseconds.
    var at: UnixMillis { get }
    /// Who acted.
    var actor: String { get }
    /// What happened.
    var action: String { get }
    /// The patient it is about, when there is one.
    var patientID: UUID? { get }
    /// Further facts.
    var details: [String: String] { get }
    /// The previous entry's hash (hex); `AuditChain.genesis` for the first.
    var previousHash: String { get }
}
