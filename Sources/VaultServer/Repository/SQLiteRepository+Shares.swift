import Foundation
import GRDB
import VaultAPI
import VaultCore

/// Tresors and the share lifecycle (Docs/design.md §3): the statements are `ShareSQL`'s and the reads
/// `SQLShareStore`'s; the writes run in one write transaction each, which SQLite's single writer orders.
extension SQLiteRepository: SQLShareStore {
    public func upsertTresor(_ t: TresorRow, audit: AuditEvent) async throws -> TresorRow {
        let grant = try RowJSON.encode(t.selfGrant)
        return try await pool.write { db in
            if let existing = try db.row(TresorRow.self, ShareSQL.tresor(t.id)) {
                if try TresorRow.unchanged(existing, proposed: t) { return existing }
                try db.execute(ShareSQL.updateTresor(t, grant: grant))
            } else {
                try db.execute(ShareSQL.insertTresor(t, grant: grant))
            }
            try Self.appendAudit(db, [audit], now: t.updatedAt)
            return t
        }
    }

    public func transitionShare(id: UUID, _ t: ShareTransition, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let approval = try t.approval.map(RowJSON.encode)
        return try await pool.write { db in
            let s = try Self.share(db, id)
            try t.check(s.state)
            try db.execute(ShareSQL.transition(id, t, approval: approval, now: now))
            try Self.appendAudit(db, [audit], now: now)
            return t.applied(to: s, at: now)
        }
    }

    public func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let json = try RowJSON.encode(grant)
        return try await pool.write { db in
            // A share whose end date passed is expired before the check, so the refusal names that state.
            _ = try Self.expireShares(db, now: now)
            var s = try Self.share(db, id)
            try ShareTransition.grantUpdate.check(s.state)
            try db.execute(ShareSQL.updateGrant(id, grant: json, now: now))
            try Self.appendAudit(db, [audit], now: now)
            s.latestGrant = grant
            s.updatedAt = now
            return s
        }
    }

    public func expireShares(now: UnixMillis) async throws -> [ShareRow] {
        try await pool.write { db in try Self.expireShares(db, now: now) }
    }

    /// `expireShares` inside the caller's write transaction.
    static func expireShares(_ db: Database, now: UnixMillis) throws -> [ShareRow] {
        let stale = try db.rows(ShareRow.self, ShareSQL.due(.pending, now: now))
        for s in stale { try db.execute(ShareSQL.rejectUnapproved(s.id, now: now)) }
        try appendAudit(db, stale.map(AuditEvent.shareExpiredBeforeApproval), now: now)
        let due = try db.rows(ShareRow.self, ShareSQL.due(.active, now: now))
        for s in due { try db.execute(ShareSQL.expire(s.id, now: now)) }
        try appendAudit(db, due.map(AuditEvent.shareExpired), now: now)
        return due.map { $0.expired(at: now) }
    }

    /// The share `id` inside a write; `.notFound` when there is none.
    static func share(_ db: Database, _ id: UUID) throws -> ShareRow {
        guard let s = try db.row(ShareRow.self, ShareSQL.share(id)) else { throw RepositoryError.notFound(ShareRow.noun) }
        return s
    }
}
