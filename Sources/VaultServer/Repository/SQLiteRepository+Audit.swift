import Foundation
import GRDB
import VaultAPI
import VaultCore

/// The hash-chained audit log and admin request replay protection (Docs/design.md §6): the statements are
/// `AuditSQL`'s and the reads `SQLAuditStore`'s.
extension SQLiteRepository: SQLAuditStore {
    public func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws {
        try await pool.write { db in try Self.appendAudit(db, events, now: now) }
    }

    /// Appends audit events inside the caller's write transaction, chained onto the recorded head.
    static func appendAudit(_ db: Database, _ events: [AuditEvent], now: UnixMillis) throws {
        guard !events.isEmpty else { return }
        var patientHeads: [UUID: String] = [:]
        for p in AuditBuilder.patients(events) { patientHeads[p] = try db.row(StoredText.self, AuditSQL.patientHead(p))?.value }
        let head = try db.row(AuditHeadRow.self, AuditSQL.head())
        let secret = try db.row(StoredBytes.self, AuditSQL.serverSecret)?.value
        let entries = try AuditSQL.entries(for: events, head: head, patientHeads: patientHeads, secret: secret, now: now)
        for e in entries { try db.execute(try AuditSQL.insert(e)) }
        try db.execute(AuditSQL.moveHead(to: entries.last!))
    }

    public func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool {
        try await pool.write { db in
            try db.execute(AuditSQL.forgetAdminSignatures(before: purgeBefore))
            return try db.row(StoredText.self, AuditSQL.rememberAdminSignature(signature, at: at)) != nil
        }
    }
}
