import Foundation
import VaultAPI
import VaultCore
import VaultServer

/// The audit log, its checkpoints and the secret its patient keys derive from, as a hostile operator
/// rewrites them (guards dropped first, stored hashes left alone unless said).
extension ServerOperator {
    /// Replaces the whole stored log with `entries`, exactly as given (hashes, digests and links included),
    /// and moves the recorded head to match. Drops the log's append-only guard and its format rule first.
    public func replaceAuditLog(with entries: [AuditEntry]) async throws {
        try await dropGuard(of: .auditLog)
        try await execute(
            backend == .sqlite ? "DROP TRIGGER IF EXISTS audit_format_2" : "DROP TRIGGER IF EXISTS audit_format_2 ON audit_log"
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        var sql = ["DELETE FROM audit_log"]
        for e in entries {
            let details = String(decoding: try encoder.encode(e.details), as: UTF8.self)
            let patient = e.patientID.map { Self.text($0.uuidString.lowercased()) } ?? "NULL"
            let patientLink = e.patientLink.map(Self.text) ?? "NULL"
            sql.append(
                "INSERT INTO audit_log (sequence, at, actor, action, patient_id, details, previous_hash, hash, format, digest, patient_link) "
                    + "VALUES (\(e.sequence), \(e.at), \(Self.text(e.actor)), \(Self.text(e.action)), \(patient), \(Self.text(details)), "
                    + "\(Self.text(e.previousHash)), \(Self.text(e.hash)), \(e.entryFormat), \(Self.text(AuditChain.digest(of: e))), \(patientLink))"
            )
        }
        let head = entries.last
        sql.append("UPDATE audit_head SET sequence = \(head?.sequence ?? 0), hash = \(Self.text(head?.hash ?? AuditChain.genesis)) WHERE id = 1")
        try await execute(sql.joined(separator: ";\n"))
    }

    /// Rewrites the audit entry at `sequence` in place, its hash, digest and the chain left as stored:
    /// `untagged` clears the patient it is about, `format` shows it as of that entry format, and
    /// `unlinked` clears its link to the patient's previous entry. Drops the log's append-only guard first.
    public func rewriteAuditEntry(sequence: UInt64, untagged: Bool = false, format: Int? = nil, unlinked: Bool = false) async throws {
        var set: [String] = []
        if untagged { set.append("patient_id = NULL") }
        if let format { set.append("format = \(format)") }
        if unlinked { set.append("patient_link = NULL") }
        try await dropGuard(of: .auditLog)
        try await execute("UPDATE audit_log SET \(set.joined(separator: ", ")) WHERE sequence = \(sequence)")
    }

    /// Clears the patient of every audit entry about `patient` after `sequence`, hashes left as stored.
    /// Drops the log's append-only guard first.
    public func untagAuditEntries(of patient: UUID, after sequence: UInt64) async throws {
        try await dropGuard(of: .auditLog)
        try await execute(
            "UPDATE audit_log SET patient_id = NULL WHERE patient_id = \(Self.text(patient.uuidString.lowercased())) AND sequence > \(sequence)"
        )
    }

    /// Deletes every audit checkpoint (their guard dropped first).
    public func dropAuditCheckpoints() async throws {
        try await dropGuard(of: .auditCheckpoints)
        try await execute("DELETE FROM audit_checkpoints")
    }

    /// Stores `checkpoint` as if the admin had signed it, without any check, at `storedAt`.
    public func insertAuditCheckpoint(_ checkpoint: AuditCheckpoint, storedAt: UnixMillis = 1) async throws {
        try await execute(
            "INSERT INTO audit_checkpoints (sequence, head_hash, signed_at, signature, stored_at) "
                + "VALUES (\(checkpoint.sequence), \(Self.text(checkpoint.headHash)), \(checkpoint.signedAt), "
                + "\(Self.text(checkpoint.signature.base64URL)), \(storedAt))"
        )
    }

    /// Replaces the server's secret (the one the patients' audit keys are derived from) by `bytes`.
    public func replaceServerSecret(with bytes: [UInt8]) async throws {
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        let value = backend == .sqlite ? "X'\(hex)'" : "'\\x\(hex)'::bytea"
        try await execute("UPDATE meta SET value = \(value) WHERE key = 'server_secret'")
    }
}
