import Foundation
import GRDB
import VaultAPI
import VaultCore

/// The hash-chained audit log and admin request replay protection (Docs/design.md §6).
extension SQLiteRepository {
    public func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws {
        try await pool.write { db in try Self.appendAudit(db, events, now: now) }
    }

    public func auditEntries(after: UInt64, limit: Int, patientID: UUID?) async throws -> [AuditEntry] {
        try await pool.read { db in
            if let patientID {
                return try Self.all(
                    AuditEntry.self,
                    db,
                    "SELECT * FROM audit_log WHERE patient_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
                    [Self.id(patientID), Int64(clamping: after), limit]
                )
            }
            return try Self.all(
                AuditEntry.self,
                db,
                "SELECT * FROM audit_log WHERE sequence > ? ORDER BY sequence LIMIT ?",
                [Int64(clamping: after), limit]
            )
        }
    }

    public func auditHead() async throws -> (sequence: UInt64, hash: String) {
        try await pool.read { db in
            guard let head = try Self.one(AuditHeadRow.self, db, "SELECT sequence, hash FROM audit_head WHERE id = 1") else {
                throw RepositoryError.notFound("audit head")
            }
            return (head.sequence, head.hash)
        }
    }

    public func auditLinks(after: UInt64, limit: Int) async throws -> [AuditLink] {
        try await pool.read { db in
            try Self.all(
                AuditLink.self,
                db,
                "SELECT \(AuditLink.columns) FROM audit_log WHERE sequence > ? ORDER BY sequence LIMIT ?",
                [Int64(clamping: after), limit]
            )
        }
    }

    public func insertAuditCheckpoint(_ checkpoint: AuditCheckpoint, storedAt: UnixMillis) async throws {
        try await write(conflict: AuditCheckpoint.alreadyStored(checkpoint.sequence)) { db in
            try db.execute(
                sql: "INSERT INTO audit_checkpoints (sequence, head_hash, signed_at, signature, stored_at) VALUES (?, ?, ?, ?, ?)",
                arguments: [
                    Int64(clamping: checkpoint.sequence), checkpoint.headHash, checkpoint.signedAt, checkpoint.signature.base64URL, storedAt,
                ]
            )
        }
    }

    public func auditCheckpoints() async throws -> [AuditCheckpoint] {
        try await pool.read { db in try Self.all(AuditCheckpoint.self, db, "SELECT * FROM audit_checkpoints ORDER BY sequence") }
    }

    public func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM admin_signatures WHERE seen_at < ?", arguments: [purgeBefore])
            try db.execute(
                sql: "INSERT INTO admin_signatures (signature, seen_at) VALUES (?, ?) ON CONFLICT (signature) DO NOTHING",
                arguments: [signature, at]
            )
            return db.changesCount == 1
        }
    }
}
