import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// The hash-chained audit log and admin request replay protection (Docs/design.md §6).
extension PostgresRepository {
    public func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws {
        try await transaction { conn in try await self.appendAudit(conn, events, now: now) }
    }

    public func auditEntries(after: UInt64, limit: Int, patientID: UUID?) async throws -> [AuditEntry] {
        let from = Int64(clamping: after)
        if let patientID {
            return try await all(
                AuditEntry.self,
                """
                SELECT * FROM audit_log WHERE patient_id = \(patientID) AND sequence > \(from) ORDER BY sequence LIMIT \(limit)
                """
            )
        }
        return try await all(AuditEntry.self, "SELECT * FROM audit_log WHERE sequence > \(from) ORDER BY sequence LIMIT \(limit)")
    }

    public func auditHead() async throws -> (sequence: UInt64, hash: String) {
        guard let head = try await all(AuditHeadRow.self, "SELECT sequence, hash FROM audit_head WHERE id = 1").first else {
            throw RepositoryError.notFound("audit head")
        }
        return (head.sequence, head.hash)
    }

    public func auditLinks(after: UInt64, limit: Int) async throws -> [AuditLink] {
        let from = Int64(clamping: after)
        return try await all(
            AuditLink.self,
            "SELECT \(unescaped: AuditLink.columns) FROM audit_log WHERE sequence > \(from) ORDER BY sequence LIMIT \(limit)"
        )
    }

    public func insertAuditCheckpoint(_ checkpoint: AuditCheckpoint, storedAt: UnixMillis) async throws {
        let sequence = Int64(clamping: checkpoint.sequence)
        let signature = checkpoint.signature.base64URL
        try await transaction(conflict: AuditCheckpoint.alreadyStored(checkpoint.sequence)) { conn in
            try await conn.query(
                """
                INSERT INTO audit_checkpoints (sequence, head_hash, signed_at, signature, stored_at)
                VALUES (\(sequence), \(checkpoint.headHash), \(checkpoint.signedAt), \(signature), \(storedAt))
                """,
                logger: logger
            )
        }
    }

    public func auditCheckpoints() async throws -> [AuditCheckpoint] {
        try await all(AuditCheckpoint.self, "SELECT * FROM audit_checkpoints ORDER BY sequence")
    }

    public func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool {
        try await client.query("DELETE FROM admin_signatures WHERE seen_at < \(purgeBefore)", logger: logger)
        var fresh = false
        for try await _ in try await client.query(
            """
            INSERT INTO admin_signatures (signature, seen_at) VALUES (\(signature), \(at)) ON CONFLICT (signature) DO NOTHING RETURNING signature
            """,
            logger: logger
        ).decode(String.self) { fresh = true }
        return fresh
    }
}
