import Foundation
import VaultAPI
import VaultCore

/// The account lifecycle's writes (Docs/design.md §2), each a flow of `AccountSQL` statements written once
/// over the caller's transaction. On PostgreSQL the account's row is locked before it is checked, so a
/// login, a credential change, a suspension and a deletion of one account happen one after another; SQLite's
/// single writer orders them as wholes, and the locks render as nothing there.
enum AccountFlow {
    /// Applies an admin's decision to a pending user (`UserDecision`).
    static func decide(
        _ sql: some SQLConnection,
        id: UUID,
        _ d: UserDecision,
        certificate: String?,
        approval: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws -> UserRow {
        guard let user = try await sql.row(UserRow.self, AccountSQL.user(id, .wait)) else { throw RepositoryError.notFound(UserRow.noun) }
        try d.check(user)
        try await sql.execute(AccountSQL.decide(id, d, certificate: certificate, approval: approval, now: now))
        try await AuditSQL.append(sql, [audit], now: now)
        return d.applied(to: user, at: now)
    }

    /// Writes columns of the account's credentials row, creating the row when needed.
    static func putCredentials(_ sql: some SQLConnection, userID: UUID, columns: [(String, String?)], now: UnixMillis) async throws {
        try await sql.execute(AccountSQL.ensureCredentials(userID, now: now))
        for (column, value) in columns { try await sql.execute(AccountSQL.setCredential(userID, column: column, value, now: now)) }
    }

    /// The recovery bundle and verifier of an account, with the rotation's audit entry when given; an
    /// account that is gone is `.notFound("user")` when `audit` is given (a rotation), unchecked otherwise.
    static func putRecovery(
        _ sql: some SQLConnection,
        userID: UUID,
        bundle: String,
        verifier: String,
        now: UnixMillis,
        audit: AuditEvent?
    ) async throws {
        if audit != nil {
            guard try await sql.row(StoredText.self, AccountSQL.userExists(userID, .noKey)) != nil else { throw RepositoryError.notFound("user") }
        }
        try await putCredentials(sql, userID: userID, columns: [("recovery_bundle", bundle), ("recovery_verifier", verifier)], now: now)
        if let audit { try await AuditSQL.append(sql, [audit], now: now) }
    }

    /// A credential change (`AccountLifecycleRepository.updateCredentials`). The account's row is locked
    /// first: a login opening a session waits for the change, or the change for the login.
    static func changeCredentials(
        _ sql: some SQLConnection,
        userID: UUID,
        _ update: CredentialUpdate,
        expecting generation: Int64,
        keeping tokenHash: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws {
        guard let current = try await sql.row(StoredNumber.self, AccountSQL.generation(userID, .noKey))?.value else {
            throw RepositoryError.notFound("user")
        }
        guard current == generation else { throw CredentialChangeRefused.changedMeanwhile }
        let stored = try await sql.row(StoredOptionalText.self, AccountSQL.credentialUpdate(userID))?.value
        if let stored = try RowJSON.decodeOptional(CredentialUpdate.self, stored), update.changedAt <= stored.changedAt {
            throw CredentialChangeRefused.notNewer(stored: stored.changedAt)
        }
        let next = try StoredNumberOutOfRange.successor(of: generation, "the credential generation")
        try await sql.execute(AccountSQL.setGeneration(userID, next, now: now))
        try await putCredentials(sql, userID: userID, columns: [("credential_update", try RowJSON.encode(update))], now: now)
        if let tokenHash {
            _ = try await deleteSessions(sql, userID: userID, .allExcept(tokenHash: tokenHash))
            try await sql.execute(AccountSQL.moveSession(userID, tokenHash: tokenHash, to: next))
        } else {
            _ = try await deleteSessions(sql, userID: userID, .all)
        }
        try await AuditSQL.append(sql, [audit], now: now)
    }

    /// A session's opening (`SessionOpening`). The account's row is locked before it is checked: a
    /// credential change, suspension or deletion committing meanwhile is seen, and one starting meanwhile
    /// waits and then ends this session with the others. Other accounts' expired sessions are the
    /// caller's to sweep, outside the transaction (`RetentionSQL.sessions`, `loginSweepBatch` at a time).
    static func openSession(_ sql: some SQLConnection, _ o: SessionOpening, now: UnixMillis) async throws {
        let id = o.session.userID
        guard let account = try await sql.row(SessionAccount.self, AccountSQL.sessionAccount(id)), account.status == AccountStatus.active.rawValue
        else { throw SessionRefused.notActive }
        guard account.suspendedAt == nil else { throw SessionRefused.suspended }
        guard account.generation == o.generation else { throw SessionRefused.credentialsChanged }
        try await sql.execute(AccountSQL.deleteExpiredSessions(id, now: now))
        // The cap: the newest `maxSessions - 1` stay beside the new one.
        try await sql.execute(AccountSQL.capSessions(id, keeping: max(0, o.maxSessions - 1)))
        try await sql.execute(AccountSQL.insertSession(o))
        guard let audit = o.audit else { return }
        if let mark = o.auditMark {
            // A mark still live means a login like this one was audited within the interval: no second entry.
            guard try await sql.row(StoredText.self, AccountSQL.markAudited(mark.key, until: mark.until, now: now)) != nil else { return }
        }
        try await AuditSQL.append(sql, [audit], now: now)
    }

    static func deleteSessions(_ sql: some SQLConnection, userID: UUID, _ selection: SessionSelection) async throws -> Int {
        try await sql.rows(StoredText.self, AccountSQL.deleteSessions(userID, selection)).count
    }

    /// A suspension (or reinstatement, `reason` nil); a suspension ends every session.
    static func setSuspension(_ sql: some SQLConnection, userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) async throws {
        guard try await sql.rows(StoredText.self, AccountSQL.suspend(userID, reason: reason, now: now)).count == 1 else {
            throw RepositoryError.notFound("user")
        }
        if reason != nil { _ = try await deleteSessions(sql, userID: userID, .all) }
        try await AuditSQL.append(sql, [audit], now: now)
    }

    /// An account's deletion (`AccountSQL.deleteAccount`).
    static func deleteAccount(_ sql: some SQLConnection, userID: UUID, now: UnixMillis, audit: AuditEvent) async throws -> DeletedAccount {
        // The account's row first: a second deletion at the same time waits here, then finds it gone.
        guard try await sql.row(StoredText.self, AccountSQL.userExists(userID, .wait)) != nil else { throw RepositoryError.notFound("account") }
        // The owner's sequence row is what pushes lock: holding it orders a concurrent push before or after.
        // Inserted first when missing, so a first push still in flight (its row not yet committed) is
        // waited for, and its versions deleted, instead of committing after the deletion's reads.
        try await sql.execute(AccountSQL.ensureOwnerSequence(userID))
        _ = try await sql.rows(StoredNumber.self, AccountSQL.ownerSequence(userID, .wait))
        let deleted = try await sql.row(DeletedAccount.self, AccountSQL.deletedCounts(userID)) ?? DeletedAccount(versions: 0, tresors: 0, shares: 0)
        for statement in AccountSQL.deleteAccount(userID) { try await sql.execute(statement) }
        try await AuditSQL.append(sql, [audit], now: now)
        return deleted
    }
}

/// The account lifecycle's writes, each one transaction of the store running its `AccountFlow`.
extension SQLAccountStore {
    public func decideUser(id: UUID, _ d: UserDecision, now: UnixMillis, audit: AuditEvent) async throws -> UserRow {
        let certificate = try d.certificate.map(RowJSON.encode)
        let approval = try d.approval.map(RowJSON.encode)
        return try await transaction(conflict: nil) { sql in
            try await AccountFlow.decide(sql, id: id, d, certificate: certificate, approval: approval, now: now, audit: audit)
        }
    }

    public func setRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis) async throws {
        let bundle = try RowJSON.encode(enrollment.bundle)
        try await transaction(conflict: nil) { sql in
            try await AccountFlow.putRecovery(sql, userID: userID, bundle: bundle, verifier: enrollment.verifier, now: now, audit: nil)
        }
    }

    public func replaceRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis, audit: AuditEvent) async throws {
        let bundle = try RowJSON.encode(enrollment.bundle)
        try await transaction(conflict: nil) { sql in
            try await AccountFlow.putRecovery(sql, userID: userID, bundle: bundle, verifier: enrollment.verifier, now: now, audit: audit)
        }
    }

    public func updateCredentials(
        userID: UUID,
        _ update: CredentialUpdate,
        expecting generation: Int64,
        keeping tokenHash: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws {
        try await transaction(conflict: nil) { sql in
            try await AccountFlow.changeCredentials(sql, userID: userID, update, expecting: generation, keeping: tokenHash, now: now, audit: audit)
        }
    }

    public func openSession(_ o: SessionOpening, now: UnixMillis) async throws {
        // Other accounts' expired sessions go outside the transaction, which locks only this account's rows;
        // rows another transaction holds are left for later rather than waited for (no deadlock with it).
        _ = try await deleted(RetentionSQL.sessions(now: now, batch: RetentionSQL.loginSweepBatch))
        try await transaction(conflict: nil) { sql in try await AccountFlow.openSession(sql, o, now: now) }
    }

    public func deleteSessions(userID: UUID, _ selection: SessionSelection) async throws -> Int {
        try await transaction(conflict: nil) { sql in try await AccountFlow.deleteSessions(sql, userID: userID, selection) }
    }

    public func setSuspension(userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) async throws {
        try await transaction(conflict: nil) { sql in
            try await AccountFlow.setSuspension(sql, userID: userID, reason: reason, now: now, audit: audit)
        }
    }

    public func deleteAccount(userID: UUID, now: UnixMillis, audit: AuditEvent) async throws -> DeletedAccount {
        try await transaction(conflict: nil) { sql in try await AccountFlow.deleteAccount(sql, userID: userID, now: now, audit: audit) }
    }
}

/// What a session's opening checks of its account.
struct SessionAccount: StoredRowDecodable, Sendable {
    var status: String?
    var suspendedAt: UnixMillis?
    var generation: Int64?

    init(stored r: some StoredRow) throws {
        status = try r.optionalString("status")
        suspendedAt = try r.optionalInt64("suspended_at")
        generation = try r.optionalInt64("credential_generation")
    }
}

/// One text column named `value` that may be NULL.
struct StoredOptionalText: StoredRowDecodable, Sendable {
    var value: String?
    init(stored r: some StoredRow) throws { value = try r.optionalString("value") }
}
