import Foundation
import GRDB
import VaultAPI
import VaultCore

/// Users and sessions (Docs/design.md §2).
extension SQLiteRepository {
    public func insertUser(_ user: UserRow, audit: AuditEvent) async throws {
        let registration = try RowJSON.encode(user.registration)
        try await write(conflict: UserRow.alreadyRegistered) { db in
            try db.execute(
                sql: """
                    INSERT INTO users (id, username, role, status, registration, certificate, approval, reject_reason, created_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, NULL, NULL, NULL, ?, ?)
                    """,
                arguments: [
                    Self.id(user.id), user.username, user.role.rawValue, user.status.rawValue, registration,
                    user.createdAt, user.updatedAt,
                ]
            )
            try Self.appendAudit(db, [audit], now: user.createdAt)
        }
    }

    public func user(id: UUID) async throws -> UserRow? {
        try await pool.read { db in try Self.one(UserRow.self, db, "SELECT * FROM users WHERE id = ?", [Self.id(id)]) }
    }

    public func user(username: String) async throws -> UserRow? {
        try await pool.read { db in try Self.one(UserRow.self, db, "SELECT * FROM users WHERE username = ?", [username]) }
    }

    public func users() async throws -> [UserRow] {
        try await pool.read { db in try Self.all(UserRow.self, db, "SELECT * FROM users ORDER BY created_at, username") }
    }

    public func decideUser(id: UUID, _ d: UserDecision, now: UnixMillis, audit: AuditEvent) async throws -> UserRow {
        let cert = try d.certificate.map(RowJSON.encode)
        let appr = try d.approval.map(RowJSON.encode)
        let sql = "UPDATE users SET status = ?, certificate = ?, approval = ?, reject_reason = ?, updated_at = ? WHERE id = ? AND status = ?"
        let arguments: StatementArguments = [d.status.rawValue, cert, appr, d.reason, now, Self.id(id), UserDecision.from.rawValue]
        return try await pool.write { db in
            try Self.transition(UserRow.self, db, id: id, to: d.status.rawValue, sql, arguments, audit: audit, now: now)
        }
    }

    public func insertSession(_ s: SessionRow) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM sessions WHERE expires_at <= ?", arguments: [s.createdAt])
            try db.execute(
                sql: "INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
                arguments: [s.tokenHash, Self.id(s.userID), s.createdAt, s.expiresAt]
            )
        }
    }

    public func session(tokenHash: String) async throws -> SessionRow? {
        try await pool.read { db in try Self.one(SessionRow.self, db, "SELECT * FROM sessions WHERE token_hash = ?", [tokenHash]) }
    }

    public func deleteSession(tokenHash: String) async throws {
        try await pool.write { db in try db.execute(sql: "DELETE FROM sessions WHERE token_hash = ?", arguments: [tokenHash]) }
    }
}

/// The account lifecycle (Docs/design.md §2): password changes, recovery, sessions, suspension, deletion.
extension SQLiteRepository {
    public func accountState(userID: UUID) async throws -> AccountState {
        try await pool.read { db in try Self.one(AccountState.self, db, AccountStateSQL.select + " ?", [Self.id(userID)]) } ?? .none
    }

    /// Writes one column of the account's credentials row, creating the row when needed.
    static func upsertCredentials(_ db: Database, userID: UUID, columns: [(String, String?)], now: UnixMillis) throws {
        try db.execute(
            sql: "INSERT INTO account_credentials (user_id, updated_at) VALUES (?, ?) ON CONFLICT (user_id) DO NOTHING",
            arguments: [Self.id(userID), now]
        )
        for (column, value) in columns {
            try db.execute(
                sql: "UPDATE account_credentials SET \(column) = ?, updated_at = ? WHERE user_id = ?",
                arguments: [value, now, Self.id(userID)]
            )
        }
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

    public func sessionCheck(tokenHash: String) async throws -> SessionCheck? {
        try await pool.read { db in try Self.one(SessionCheck.self, db, AccountStateSQL.sessionCheck + " ?", [tokenHash]) }
    }

    public func sessionEntries(userID: UUID, now: UnixMillis) async throws -> [SessionEntry] {
        try await pool.read { db in
            try Self.all(
                SessionEntry.self,
                db,
                AccountStateSQL.liveSessions.replacingOccurrences(of: "$1", with: "?").replacingOccurrences(of: "$2", with: "?"),
                [Self.id(userID), now]
            )
        }
    }

    public func deleteSessions(userID: UUID, _ selection: SessionSelection) async throws -> Int {
        try await pool.write { db in try Self.deleteSessions(db, userID: userID, selection) }
    }

    static func deleteSessions(_ db: Database, userID: UUID, _ selection: SessionSelection) throws -> Int {
        switch selection {
        case .all: try db.execute(sql: "DELETE FROM sessions WHERE user_id = ?", arguments: [Self.id(userID)])
        case .allExcept(let keep):
            try db.execute(sql: "DELETE FROM sessions WHERE user_id = ? AND token_hash <> ?", arguments: [Self.id(userID), keep])
        case .id(let id):
            try db.execute(sql: "DELETE FROM sessions WHERE user_id = ? AND substr(token_hash, 1, 16) = ?", arguments: [Self.id(userID), id])
        }
        return db.changesCount
    }

    public func touchSession(tokenHash: String, now: UnixMillis) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE sessions SET last_used_at = ? WHERE token_hash = ? AND (last_used_at IS NULL OR last_used_at <= ?)",
                arguments: [now, tokenHash, now - AccountStateSQL.touchIntervalMs]
            )
        }
    }

    public func setSuspension(userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) async throws {
        try await pool.write { db in try Self.setSuspension(db, userID: userID, reason: reason, now: now, audit: audit) }
    }

    /// A suspension's (or reinstatement's) statements in the caller's write transaction (`setSuspension`).
    static func setSuspension(_ db: Database, userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) throws {
        try db.execute(
            sql: "UPDATE users SET suspended_at = ?, suspend_reason = ?, updated_at = ? WHERE id = ?",
            arguments: [reason == nil ? nil : now, reason, now, Self.id(userID)]
        )
        guard db.changesCount == 1 else { throw RepositoryError.notFound("user") }
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
            func count(_ sql: String) throws -> Int { try Int.fetchOne(db, sql: sql, arguments: [owner]) ?? 0 }
            let deleted = DeletedAccount(
                versions: try count("SELECT count(*) AS n FROM versions WHERE owner_id = ?"),
                tresors: try count("SELECT count(*) AS n FROM tresors WHERE owner_id = ?"),
                shares: try count("SELECT count(*) AS n FROM shares WHERE patient_id = ?")
            )
            for sql in AccountStateSQL.deleteAccount { try db.execute(sql: sql.replacingOccurrences(of: "$1", with: "?"), arguments: [owner]) }
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
