import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// A row of `audit_checkpoints`, read the same way by both backends.
extension AuditCheckpoint: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        try self.init(
            sequence: r.uint64("sequence"),
            headHash: r.string("head_hash"),
            signedAt: r.int64("signed_at"),
            signature: Signature(base64URL: r.string("signature"))
        )
    }

    /// The conflict reported when a checkpoint at this sequence is stored already.
    static func alreadyStored(_ sequence: UInt64) -> String { "a checkpoint at entry \(sequence) is stored already" }
}

/// The chain columns of an `audit_log` row, without its contents: for format 2 also the stored digest and
/// per-patient link, from which the patient recomputes the hash (Docs/envelope-v1.md §3.1).
extension AuditLink: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        try self.init(
            sequence: r.uint64("sequence"),
            previousHash: r.string("previous_hash"),
            hash: r.string("hash"),
            format: AuditEntry.format(r.int64("format")),
            digest: r.optionalString("digest"),
            patientLink: r.optionalString("patient_link")
        )
    }

    /// The columns a link is read from.
    static let columns = "sequence, previous_hash, hash, format, digest, patient_link"
}
