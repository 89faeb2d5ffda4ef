import Foundation
import VaultAPI
import VaultCore

/// The statements of users and sessions (Docs/design.md §2), written once for both engines.
extension AccountSQL {
    static func insertUser(_ user: UserRow, registration: String) -> SQLStatement {
        """
        INSERT INTO users (id, username, role, status, registration, created_at, updated_at)
        VALUES (\(user.id), \(user.username), \(user.role.rawValue), \(user.status.rawValue), \(registration), \(user.createdAt), \(user.updatedAt))
        """
    }

    static func user(_ id: UUID, _ lock: SQLStatement.ForUpdate? = nil) -> SQLStatement { "SELECT * FROM users WHERE id = \(id)\(forUpdate: lock)" }
    static func user(username: String) -> SQLStatement { "SELECT * FROM users WHERE username = \(username)" }
    static let users: SQLStatement = "SELECT * FROM users ORDER BY created_at, username"

    static func decide(_ id: UUID, _ d: UserDecision, certificate: String?, approval: String?, now: UnixMillis) -> SQLStatement {
        """
        UPDATE users SET status = \(d.status.rawValue), certificate = \(certificate), approval = \(approval), reject_reason = \(d.reason),
               updated_at = \(now)
        WHERE id = \(id)
        """
    }

    static func deleteExpiredSessions(now: UnixMillis) -> SQLStatement { "DELETE FROM sessions WHERE expires_at <= \(now)" }

    static func insertSession(_ s: SessionRow) -> SQLStatement {
        "INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES (\(s.tokenHash), \(s.userID), \(s.createdAt), \(s.expiresAt))"
    }

    static func session(_ tokenHash: String) -> SQLStatement {
        "SELECT token_hash, user_id, created_at, expires_at FROM sessions WHERE token_hash = \(tokenHash)"
    }

    /// Suspends the account at `now` (or reinstates it, `reason` nil); one row back when the account exists.
    static func suspend(_ userID: UUID, reason: String?, now: UnixMillis) -> SQLStatement {
        let at: Int64? = reason == nil ? nil : now
        return """
            UPDATE users SET suspended_at = \(at), suspend_reason = \(reason), updated_at = \(now) WHERE id = \(userID)
            RETURNING username AS value
            """
    }

    static func deleteSession(_ tokenHash: String) -> SQLStatement { "DELETE FROM sessions WHERE token_hash = \(tokenHash)" }

    /// One row (the username) when the account exists.
    static func userExists(_ id: UUID, _ lock: SQLStatement.ForUpdate) -> SQLStatement {
        "SELECT username AS value FROM users WHERE id = \(id)\(forUpdate: lock)"
    }

    static func generation(_ id: UUID, _ lock: SQLStatement.ForUpdate) -> SQLStatement {
        "SELECT credential_generation AS value FROM users WHERE id = \(id)\(forUpdate: lock)"
    }

    static func credentialUpdate(_ userID: UUID) -> SQLStatement {
        "SELECT credential_update AS value FROM account_credentials WHERE user_id = \(userID)"
    }

    static func setGeneration(_ id: UUID, _ generation: Int64, now: UnixMillis) -> SQLStatement {
        "UPDATE users SET credential_generation = \(generation), updated_at = \(now) WHERE id = \(id)"
    }

    /// Moves the session a credential change keeps to the new generation.
    static func moveSession(_ userID: UUID, tokenHash: String, to generation: Int64) -> SQLStatement {
        "UPDATE sessions SET credential_generation = \(generation) WHERE user_id = \(userID) AND token_hash = \(tokenHash)"
    }

    /// What a session's opening checks (`SessionAccount`), the row locked without blocking rows that only
    /// reference it.
    static func sessionAccount(_ id: UUID) -> SQLStatement {
        "SELECT status, suspended_at, credential_generation FROM users WHERE id = \(id)\(forUpdate: .noKey)"
    }

    static func deleteExpiredSessions(_ userID: UUID, now: UnixMillis) -> SQLStatement {
        "DELETE FROM sessions WHERE user_id = \(userID) AND expires_at <= \(now)"
    }

    /// Ends the account's sessions but the newest `keeping`.
    static func capSessions(_ userID: UUID, keeping: Int) -> SQLStatement {
        """
        DELETE FROM sessions WHERE token_hash IN (
            SELECT token_hash FROM sessions WHERE user_id = \(userID) ORDER BY created_at DESC, token_hash DESC\(sqlite: " LIMIT -1", postgres: "")
            OFFSET \(Int64(keeping)))
        """
    }

    static func insertSession(_ o: SessionOpening) -> SQLStatement {
        """
        INSERT INTO sessions (token_hash, user_id, created_at, expires_at, device_name, credential_generation)
        VALUES (\(o.session.tokenHash), \(o.session.userID), \(o.session.createdAt), \(o.session.expiresAt), \(o.deviceName), \(o.generation))
        """
    }

    /// Marks a login as audited until `until`, unless a live mark exists: one row back when it was marked now.
    static func markAudited(_ key: String, until: UnixMillis, now: UnixMillis) -> SQLStatement {
        """
        INSERT INTO login_throttle AS t (key, failures, last_failure, expires_at) VALUES (\(key), 0, \(now), \(until))
        ON CONFLICT (key) DO UPDATE SET failures = 0, last_failure = EXCLUDED.last_failure, expires_at = EXCLUDED.expires_at
        WHERE t.expires_at <= \(now)
        RETURNING key AS value
        """
    }

    /// The owner's row that pushes lock, made when missing (see `AccountSQL.deleteAccount`).
    static func ensureOwnerSequence(_ owner: UUID) -> SQLStatement {
        "INSERT INTO owner_sequences (owner_id, last_sequence) VALUES (\(owner), 0) ON CONFLICT DO NOTHING"
    }

    static func ownerSequence(_ owner: UUID, _ lock: SQLStatement.ForUpdate) -> SQLStatement {
        "SELECT last_sequence AS value FROM owner_sequences WHERE owner_id = \(owner)\(forUpdate: lock)"
    }
}

/// The reads of accounts and sessions, and their single-statement writes, written once over either
/// engine's `SQLConnection`.
protocol SQLAccountStore: AccountRepository, AccountLifecycleRepository, SQLStore {}

extension SQLAccountStore {
    public func insertUser(_ user: UserRow, audit: AuditEvent) async throws {
        let insert = AccountSQL.insertUser(user, registration: try RowJSON.encode(user.registration))
        try await execute(insert, audit: [audit], now: user.createdAt, conflict: UserRow.alreadyRegistered)
    }

    public func user(id: UUID) async throws -> UserRow? { try await row(UserRow.self, AccountSQL.user(id)) }
    public func user(username: String) async throws -> UserRow? { try await row(UserRow.self, AccountSQL.user(username: username)) }
    public func users() async throws -> [UserRow] { try await rows(UserRow.self, AccountSQL.users) }
    public func session(tokenHash: String) async throws -> SessionRow? { try await row(SessionRow.self, AccountSQL.session(tokenHash)) }
    public func deleteSession(tokenHash: String) async throws { try await execute(AccountSQL.deleteSession(tokenHash)) }

    public func insertSession(_ s: SessionRow) async throws {
        try await execute(AccountSQL.deleteExpiredSessions(now: s.createdAt))
        try await execute(AccountSQL.insertSession(s))
    }

    public func accountState(userID: UUID) async throws -> AccountState { try await row(AccountState.self, AccountSQL.state(userID)) ?? .none }
    public func sessionCheck(tokenHash: String) async throws -> SessionCheck? { try await row(SessionCheck.self, AccountSQL.sessionCheck(tokenHash)) }

    public func sessionEntries(userID: UUID, now: UnixMillis) async throws -> [SessionEntry] {
        try await rows(SessionEntry.self, AccountSQL.liveSessions(userID, now: now))
    }

    public func touchSession(tokenHash: String, now: UnixMillis) async throws { try await execute(AccountSQL.touch(tokenHash, now: now)) }
}
