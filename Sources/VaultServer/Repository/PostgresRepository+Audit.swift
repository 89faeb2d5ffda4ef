import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// The hash-chained audit log and admin request replay protection (Docs/design.md §6): the statements are
/// `AuditSQL`'s and the reads `SQLAuditStore`'s.
extension PostgresRepository: SQLAuditStore {
    public func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws {
        try await transaction { conn in try await self.appendAudit(conn, events, now: now) }
    }

    /// Appends audit events inside the caller's transaction, chained onto the recorded head, whose row
    /// lock orders concurrent appenders.
    func appendAudit(_ conn: PostgresConnection, _ events: [AuditEvent], now: UnixMillis) async throws {
        guard !events.isEmpty else { return }
        let sql = PostgresSQL(connection: conn, logger: logger)
        let head = try await sql.row(AuditHeadRow.self, AuditSQL.head(.wait))
        var patientHeads: [UUID: String] = [:]
        for p in AuditBuilder.patients(events) { patientHeads[p] = try await sql.row(StoredText.self, AuditSQL.patientHead(p))?.value }
        let secret = try await sql.row(StoredBytes.self, AuditSQL.serverSecret)?.value
        let entries = try AuditSQL.entries(for: events, head: head, patientHeads: patientHeads, secret: secret, now: now)
        for e in entries { try await sql.execute(try AuditSQL.insert(e)) }
        try await sql.execute(AuditSQL.moveHead(to: entries.last!))
    }

    public func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool {
        try await execute(AuditSQL.forgetAdminSignatures(before: purgeBefore))
        return try await row(StoredText.self, AuditSQL.rememberAdminSignature(signature, at: at)) != nil
    }
}
