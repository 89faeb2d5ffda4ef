import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// Tresors and the share lifecycle (Docs/design.md §3): the statements are `ShareSQL`'s and the reads
/// `SQLShareStore`'s. Changes lock the row first, then check the state machine, so concurrent server
/// instances agree.
extension PostgresRepository: SQLShareStore {
    public func upsertTresor(_ t: TresorRow, audit: AuditEvent) async throws -> TresorRow {
        let grant = try RowJSON.encode(t.selfGrant)
        return try await transaction(conflict: "tresor was created concurrently; retry") { conn in
            let sql = PostgresSQL(connection: conn, logger: self.logger)
            if let existing = try await sql.row(TresorRow.self, ShareSQL.tresor(t.id, .wait)) {
                if try TresorRow.unchanged(existing, proposed: t) { return existing }
                try await sql.execute(ShareSQL.updateTresor(t, grant: grant))
            } else {
                try await sql.execute(ShareSQL.insertTresor(t, grant: grant))
            }
            try await self.appendAudit(conn, [audit], now: t.updatedAt)
            return t
        }
    }

    public func transitionShare(id: UUID, _ t: ShareTransition, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let approval = try t.approval.map(RowJSON.encode)
        return try await transaction { conn in
            let s = try await self.locked(ShareRow.self, conn, id)
            try t.check(s.state)
            try await PostgresSQL(connection: conn, logger: self.logger).execute(ShareSQL.transition(id, t, approval: approval, now: now))
            try await self.appendAudit(conn, [audit], now: now)
            return t.applied(to: s, at: now)
        }
    }

    public func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let json = try RowJSON.encode(grant)
        return try await transaction { conn in
            // A share whose end date passed is expired before the check, so the refusal names that state.
            _ = try await self.expireShares(conn, now: now)
            var s = try await self.locked(ShareRow.self, conn, id)
            try ShareTransition.grantUpdate.check(s.state)
            try await PostgresSQL(connection: conn, logger: self.logger).execute(ShareSQL.updateGrant(id, grant: json, now: now))
            try await self.appendAudit(conn, [audit], now: now)
            s.latestGrant = grant
            s.updatedAt = now
            return s
        }
    }

    public func expireShares(now: UnixMillis) async throws -> [ShareRow] {
        try await transaction { conn in try await self.expireShares(conn, now: now) }
    }

    /// `expireShares` inside the caller's transaction; rows another transaction is moving are skipped.
    func expireShares(_ conn: PostgresConnection, now: UnixMillis) async throws -> [ShareRow] {
        let sql = PostgresSQL(connection: conn, logger: logger)
        let stale = try await sql.rows(ShareRow.self, ShareSQL.due(.pending, now: now))
        for s in stale { try await sql.execute(ShareSQL.rejectUnapproved(s.id, now: now)) }
        try await appendAudit(conn, stale.map(AuditEvent.shareExpiredBeforeApproval), now: now)
        let due = try await sql.rows(ShareRow.self, ShareSQL.due(.active, now: now))
        for s in due { try await sql.execute(ShareSQL.expire(s.id, now: now)) }
        try await appendAudit(conn, due.map(AuditEvent.shareExpired), now: now)
        return due.map { $0.expired(at: now) }
    }
}
