import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// Users and sessions (Docs/design.md §2).
extension PostgresRepository {
    public func insertUser(_ user: UserRow, audit: AuditEvent) async throws {
        let registration = try RowJSON.encode(user.registration)
        try await transaction(conflict: UserRow.alreadyRegistered) { conn in
            try await conn.query(
                """
                INSERT INTO users (id, username, role, status, registration, created_at, updated_at)
                VALUES (\(user.id), \(user.username), \(user.role.rawValue), \(user.status.rawValue), \(registration), \(user.createdAt),
                        \(user.updatedAt))
                """,
                logger: logger
            )
            try await appendAudit(conn, [audit], now: user.createdAt)
        }
    }

    public func user(id: UUID) async throws -> UserRow? {
        try await all(UserRow.self, "SELECT * FROM users WHERE id = \(id)").first
    }

    public func user(username: String) async throws -> UserRow? {
        try await all(UserRow.self, "SELECT * FROM users WHERE username = \(username)").first
    }

    public func users() async throws -> [UserRow] {
        try await all(UserRow.self, "SELECT * FROM users ORDER BY created_at, username")
    }

    public func decideUser(id: UUID, _ d: UserDecision, now: UnixMillis, audit: AuditEvent) async throws -> UserRow {
        let cert = try d.certificate.map(RowJSON.encode)
        let appr = try d.approval.map(RowJSON.encode)
        return try await transaction { conn in
            let user = try await self.locked(UserRow.self, conn, id)
            try d.check(user)
            try await conn.query(
                """
                UPDATE users SET status = \(d.status.rawValue), certificate = \(cert), approval = \(appr), reject_reason = \(d.reason),
                       updated_at = \(now)
                WHERE id = \(id)
                """,
                logger: logger
            )
            try await self.appendAudit(conn, [audit], now: now)
            return d.applied(to: user, at: now)
        }
    }

    public func insertSession(_ s: SessionRow) async throws {
        try await client.query("DELETE FROM sessions WHERE expires_at <= \(s.createdAt)", logger: logger)
        try await client.query(
            """
            INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES (\(s.tokenHash), \(s.userID), \(s.createdAt), \(s.expiresAt))
            """,
            logger: logger
        )
    }

    public func session(tokenHash: String) async throws -> SessionRow? {
        try await all(SessionRow.self, "SELECT token_hash, user_id, created_at, expires_at FROM sessions WHERE token_hash = \(tokenHash)").first
    }

    public func deleteSession(tokenHash: String) async throws {
        try await client.query("DELETE FROM sessions WHERE token_hash = \(tokenHash)", logger: logger)
    }
}

/// The login back-off table (Docs/design.md §2), shared by every instance on the database.
extension PostgresRepository {
    public func loginThrottle(keys: [String], now: UnixMillis) async throws -> [LoginThrottleRow] {
        let rows = try await client.query(
            "SELECT key, failures, last_failure, expires_at FROM login_throttle WHERE key = ANY(\(keys)) AND expires_at > \(now)",
            logger: logger
        )
        var out: [LoginThrottleRow] = []
        for try await (key, failures, last, expires) in rows.decode((String, Int64, Int64, Int64).self) {
            out.append(LoginThrottleRow(key: key, failures: failures, lastFailure: last, expiresAt: expires))
        }
        return out
    }

    public func recordLoginFailure(keys: [String], now: UnixMillis, expiresAt: UnixMillis) async throws {
        try await client.query("DELETE FROM login_throttle WHERE expires_at <= \(now)", logger: logger)
        // One statement per key, each atomic on its own: two instances counting the same key both count,
        // and no transaction holds two keys' locks at once (no deadlock between requests).
        for key in keys {
            try await client.query(
                """
                INSERT INTO login_throttle AS t (key, failures, last_failure, expires_at) VALUES (\(key), 1, \(now), \(expiresAt))
                ON CONFLICT (key) DO UPDATE SET
                    failures = CASE WHEN t.expires_at > \(now) THEN t.failures + 1 ELSE 1 END,
                    last_failure = GREATEST(t.last_failure, EXCLUDED.last_failure),
                    expires_at = GREATEST(t.expires_at, EXCLUDED.expires_at)
                """,
                logger: logger
            )
        }
    }

    public func recordLoginTrust(key: String, now: UnixMillis, expiresAt: UnixMillis) async throws {
        try await client.query("DELETE FROM login_throttle WHERE expires_at <= \(now)", logger: logger)
        try await client.query(
            """
            INSERT INTO login_throttle AS t (key, failures, last_failure, expires_at) VALUES (\(key), 0, 0, \(expiresAt))
            ON CONFLICT (key) DO UPDATE SET expires_at = GREATEST(t.expires_at, EXCLUDED.expires_at)
            """,
            logger: logger
        )
    }
}
