import Foundation
import GRDB
import VaultAPI
import VaultCore

/// Users and sessions (Docs/design.md §2): the statements are `AccountSQL`'s and the reads and
/// single-statement writes `SQLAccountStore`'s.
extension SQLiteRepository: SQLAccountStore {
    public func decideUser(id: UUID, _ d: UserDecision, now: UnixMillis, audit: AuditEvent) async throws -> UserRow {
        let certificate = try d.certificate.map(RowJSON.encode)
        let approval = try d.approval.map(RowJSON.encode)
        return try await pool.write { db in
            guard let user = try db.row(UserRow.self, AccountSQL.user(id)) else { throw RepositoryError.notFound(UserRow.noun) }
            try d.check(user)
            try db.execute(AccountSQL.decide(id, d, certificate: certificate, approval: approval, now: now))
            try Self.appendAudit(db, [audit], now: now)
            return d.applied(to: user, at: now)
        }
    }

}

/// The account lifecycle (Docs/design.md §2): password changes, recovery, sessions, suspension, deletion.
extension SQLiteRepository {
    /// Writes one column of the account's credentials row, creating the row when needed.
    static func upsertCredentials(_ db: Database, userID: UUID, columns: [(String, String?)], now: UnixMillis) throws {
        try db.execute(AccountSQL.ensureCredentials(userID, now: now))
        for (column, value) in columns { try db.execute(AccountSQL.setCredential(userID, column: column, value, now: now)) }
    }

    public func setRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis) async throws {
        let bundle = try RowJSON.encode(enrollment.bundle)
        try await pool.write { db in
            try Self.upsertCredentials(
                db,
                userID: userID,
                columns: [("recovery_bundle", bundle), ("recovery_verifier", enrollment.verifier)],
                now: now
            )
        }
    }

    public func replaceRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis, audit: AuditEvent) async throws {
        let bundle = try RowJSON.encode(enrollment.bundle)
        try await pool.write { db in
            guard try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM users WHERE id = ?)", arguments: [Self.id(userID)]) == true else {
                throw RepositoryError.notFound("user")
            }
            try Self.upsertCredentials(
                db,
                userID: userID,
                columns: [("recovery_bundle", bundle), ("recovery_verifier", enrollment.verifier)],
                now: now
            )
            try Self.appendAudit(db, [audit], now: now)
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
        try await pool.write { db in
            try Self.changeCredentials(db, userID: userID, update, expecting: generation, keeping: tokenHash, now: now, audit: audit)
        }
    }

    /// A credential change's statements in the caller's write transaction (`updateCredentials`).
    static func changeCredentials(
        _ db: Database,
        userID: UUID,
        _ update: CredentialUpdate,
        expecting generation: Int64,
        keeping tokenHash: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) throws {
        let id = Self.id(userID)
        guard let current = try Int64.fetchOne(db, sql: "SELECT credential_generation FROM users WHERE id = ?", arguments: [id]) else {
            throw RepositoryError.notFound("user")
        }
        guard current == generation else { throw CredentialChangeRefused.changedMeanwhile }
        let stored = try String.fetchOne(db, sql: "SELECT credential_update FROM account_credentials WHERE user_id = ?", arguments: [id])
        if let stored = try RowJSON.decodeOptional(CredentialUpdate.self, stored), update.changedAt <= stored.changedAt {
            throw CredentialChangeRefused.notNewer(stored: stored.changedAt)
        }
        let next = try StoredNumberOutOfRange.successor(of: generation, "the credential generation")
        try db.execute(sql: "UPDATE users SET credential_generation = ?, updated_at = ? WHERE id = ?", arguments: [next, now, id])
        try upsertCredentials(db, userID: userID, columns: [("credential_update", try RowJSON.encode(update))], now: now)
        if let tokenHash {
            _ = try deleteSessions(db, userID: userID, .allExcept(tokenHash: tokenHash))
            try db.execute(
                sql: "UPDATE sessions SET credential_generation = ? WHERE user_id = ? AND token_hash = ?",
                arguments: [next, id, tokenHash]
            )
        } else {
            _ = try deleteSessions(db, userID: userID, .all)
        }
        try appendAudit(db, [audit], now: now)
    }

    public func openSession(_ o: SessionOpening, now: UnixMillis) async throws {
        try await pool.write { db in try Self.openSession(db, o, now: now) }
    }

    /// A session's opening in the caller's write transaction (`openSession`); SQLite's single writer
    /// orders it before or after any credential change or suspension as a whole.
    static func openSession(_ db: Database, _ o: SessionOpening, now: UnixMillis) throws {
        let id = Self.id(o.session.userID)
        guard let account = try Row.fetchOne(db, sql: "SELECT status, suspended_at, credential_generation FROM users WHERE id = ?", arguments: [id]),
            try account.optionalString("status") == AccountStatus.active.rawValue
        else { throw SessionRefused.notActive }
        guard try account.optionalInt64("suspended_at") == nil else { throw SessionRefused.suspended }
        guard try account.optionalInt64("credential_generation") == o.generation else { throw SessionRefused.credentialsChanged }
        try db.execute(sql: "DELETE FROM sessions WHERE expires_at <= ?", arguments: [now])
        // The cap: the newest `maxSessions - 1` stay beside the new one.
        try db.execute(
            sql: """
                DELETE FROM sessions WHERE token_hash IN (
                    SELECT token_hash FROM sessions WHERE user_id = ? ORDER BY created_at DESC, token_hash DESC LIMIT -1 OFFSET ?)
                """,
            arguments: [id, max(0, o.maxSessions - 1)]
        )
        try db.execute(
            sql: "INSERT INTO sessions (token_hash, user_id, created_at, expires_at, device_name, credential_generation) VALUES (?, ?, ?, ?, ?, ?)",
            arguments: [o.session.tokenHash, id, o.session.createdAt, o.session.expiresAt, o.deviceName, o.generation]
        )
        guard let audit = o.audit else { return }
        if let mark = o.auditMark {
            let marked = try Bool.fetchOne(
                db,
                sql: "SELECT EXISTS (SELECT 1 FROM login_throttle WHERE key = ? AND expires_at > ?)",
                arguments: [mark.key, now]
            )
            if marked == true { return }
            try db.execute(
                sql: """
                    INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (?, 0, ?, ?)
                    ON CONFLICT (key) DO UPDATE SET failures = 0, last_failure = excluded.last_failure, expires_at = excluded.expires_at
                    """,
                arguments: [mark.key, now, mark.until]
            )
        }
        try appendAudit(db, [audit], now: now)
    }

    public func deleteSessions(userID: UUID, _ selection: SessionSelection) async throws -> Int {
        try await pool.write { db in try Self.deleteSessions(db, userID: userID, selection) }
    }

    static func deleteSessions(_ db: Database, userID: UUID, _ selection: SessionSelection) throws -> Int {
        try db.rows(StoredText.self, AccountSQL.deleteSessions(userID, selection)).count
    }

    public func setSuspension(userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) async throws {
        try await pool.write { db in try Self.setSuspension(db, userID: userID, reason: reason, now: now, audit: audit) }
    }

    /// A suspension's (or reinstatement's) statements in the caller's write transaction (`setSuspension`).
    static func setSuspension(_ db: Database, userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) throws {
        guard try db.rows(StoredText.self, AccountSQL.suspend(userID, reason: reason, now: now)).count == 1 else {
            throw RepositoryError.notFound("user")
        }
        if reason != nil { _ = try Self.deleteSessions(db, userID: userID, .all) }
        try Self.appendAudit(db, [audit], now: now)
    }

    public func deleteAccount(userID: UUID, now: UnixMillis, audit: AuditEvent) async throws -> DeletedAccount {
        let owner = Self.id(userID)
        return try await pool.write { db in
            // Deleted already (two requests at once): nothing to delete, nothing more to audit.
            guard try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM users WHERE id = ?)", arguments: [owner]) == true else {
                throw RepositoryError.notFound("account")
            }
            let deleted = try db.row(DeletedAccount.self, AccountSQL.deletedCounts(userID)) ?? DeletedAccount(versions: 0, tresors: 0, shares: 0)
            for statement in AccountSQL.deleteAccount(userID) { try db.execute(statement) }
            try Self.appendAudit(db, [audit], now: now)
            return deleted
        }
    }
}

/// The login back-off table (Docs/design.md §2); SQLite's single writer makes each read-and-write atomic.
extension SQLiteRepository {
    public func loginThrottle(keys: [String], now: UnixMillis) async throws -> [LoginThrottleRow] {
        try await pool.read { db in
            let marks = Array(repeating: "?", count: keys.count).joined(separator: ", ")
            var arguments = StatementArguments(keys)
            arguments += [now]
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT key, failures, last_failure, expires_at FROM login_throttle WHERE key IN (\(marks)) AND expires_at > ?",
                arguments: arguments
            )
            return try rows.map(LoginThrottleRow.init(stored:))
        }
    }

    public func updateLoginThrottle<T: Sendable>(
        keys: [String],
        now: UnixMillis,
        _ decide: @Sendable ([LoginThrottleRow]) -> (writes: [LoginThrottleRow], result: T)
    ) async throws -> T {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM login_throttle WHERE expires_at <= ?", arguments: [now])
            let marks = Array(repeating: "?", count: keys.count).joined(separator: ", ")
            var arguments = StatementArguments(keys)
            arguments += [now]
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT key, failures, last_failure, expires_at FROM login_throttle WHERE key IN (\(marks)) AND expires_at > ? ORDER BY key",
                arguments: arguments
            ).map(LoginThrottleRow.init(stored:))
            let (writes, result) = decide(rows)
            for w in writes {
                try db.execute(
                    sql: """
                        INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (?, ?, ?, ?)
                        ON CONFLICT (key) DO UPDATE SET
                            failures = excluded.failures, last_failure = excluded.last_failure, expires_at = excluded.expires_at
                        """,
                    arguments: [w.key, w.failures, w.lastFailure, w.expiresAt]
                )
            }
            return result
        }
    }
}

extension LoginThrottleRow {
    /// A throttle row read back, each column checked (an edited row fails the request, not the process).
    init(stored r: some StoredRow) throws {
        self.init(
            key: try r.string("key"),
            failures: try r.int64("failures"),
            lastFailure: try r.int64("last_failure"),
            expiresAt: try r.int64("expires_at")
        )
    }
}
