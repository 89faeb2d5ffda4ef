import Foundation
import VaultAPI
import VaultCore

/// The writes of tresors and shares (Docs/design.md §3), each a flow of `ShareSQL` statements written once
/// over the caller's transaction: the row is read (on PostgreSQL locked, so concurrent server instances
/// agree), the state machine checked on it, then the row updated and the change audited.
enum ShareFlow {
    /// Creates a tresor or moves it to a newer epoch (`TresorRow.unchanged`).
    static func upsertTresor(_ sql: some SQLConnection, _ t: TresorRow, grant: String, audit: AuditEvent) async throws -> TresorRow {
        if let existing = try await sql.row(TresorRow.self, ShareSQL.tresor(t.id, .wait)) {
            if try TresorRow.unchanged(existing, proposed: t) { return existing }
            try await sql.execute(ShareSQL.updateTresor(t, grant: grant))
            // A new self-grant of the same epoch (a newer tresor version, Docs/envelope-v1.md §3.2) is not a
            // new epoch: the patient's access log says "tresor.epoch" once per epoch, not once per declaration.
            if existing.currentEpoch == t.currentEpoch { return t }
        } else {
            try await sql.execute(ShareSQL.insertTresor(t, grant: grant))
        }
        try await AuditSQL.append(sql, [audit], now: t.updatedAt)
        return t
    }

    /// The share `id`, locked; `.notFound` when there is none.
    static func share(_ sql: some SQLConnection, _ id: UUID) async throws -> ShareRow {
        guard let s = try await sql.row(ShareRow.self, ShareSQL.share(id, .wait)) else { throw RepositoryError.notFound(ShareRow.noun) }
        return s
    }

    static func transition(
        _ sql: some SQLConnection,
        id: UUID,
        _ t: ShareTransition,
        approval: String?,
        now: UnixMillis,
        audit: AuditEvent
    )
        async throws -> ShareRow
    {
        let s = try await share(sql, id)
        try t.check(s.state)
        try await sql.execute(ShareSQL.transition(id, t, approval: approval, now: now))
        try await AuditSQL.append(sql, [audit], now: now)
        return t.applied(to: s, at: now)
    }

    static func updateGrant(
        _ sql: some SQLConnection,
        id: UUID,
        grant: Grant,
        json: String,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws -> ShareRow {
        // A share whose end date passed is expired before the check, so the refusal names that state.
        _ = try await expire(sql, now: now)
        var s = try await share(sql, id)
        try ShareTransition.grantUpdate.check(s.state)
        try await sql.execute(ShareSQL.updateGrant(id, grant: json, now: now))
        try await AuditSQL.append(sql, [audit], now: now)
        s.latestGrant = grant
        s.updatedAt = now
        return s
    }

    /// `ShareRepository.expireShares` in the caller's transaction; on PostgreSQL rows another transaction
    /// is moving are skipped (`ShareSQL.due`).
    static func expire(_ sql: some SQLConnection, now: UnixMillis) async throws -> [ShareRow] {
        let stale = try await sql.rows(ShareRow.self, ShareSQL.due(.pending, now: now))
        for s in stale { try await sql.execute(ShareSQL.rejectUnapproved(s.id, now: now)) }
        try await AuditSQL.append(sql, stale.map(AuditEvent.shareExpiredBeforeApproval), now: now)
        let due = try await sql.rows(ShareRow.self, ShareSQL.due(.active, now: now))
        for s in due { try await sql.execute(ShareSQL.expire(s.id, now: now)) }
        try await AuditSQL.append(sql, due.map(AuditEvent.shareExpired), now: now)
        return due.map { $0.expired(at: now) }
    }
}

/// The writes of tresors and shares, each one transaction of the store running its `ShareFlow`.
extension SQLShareStore {
    public func upsertTresor(_ t: TresorRow, audit: AuditEvent) async throws -> TresorRow {
        let grant = try RowJSON.encode(t.selfGrant)
        return try await transaction(conflict: "tresor was created concurrently; retry") { sql in
            try await ShareFlow.upsertTresor(sql, t, grant: grant, audit: audit)
        }
    }

    public func transitionShare(id: UUID, _ t: ShareTransition, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let approval = try t.approval.map(RowJSON.encode)
        return try await transaction(conflict: nil) { sql in
            try await ShareFlow.transition(sql, id: id, t, approval: approval, now: now, audit: audit)
        }
    }

    public func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let json = try RowJSON.encode(grant)
        return try await transaction(conflict: nil) { sql in
            try await ShareFlow.updateGrant(sql, id: id, grant: grant, json: json, now: now, audit: audit)
        }
    }

    public func expireShares(now: UnixMillis) async throws -> [ShareRow] {
        try await transaction(conflict: nil) { sql in try await ShareFlow.expire(sql, now: now) }
    }
}
