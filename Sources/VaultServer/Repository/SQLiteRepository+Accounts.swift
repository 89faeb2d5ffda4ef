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

/// The login back-off table (Docs/design.md §2); SQLite's single writer makes each update atomic.
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
            return rows.map {
                LoginThrottleRow(key: $0["key"], failures: $0["failures"], lastFailure: $0["last_failure"], expiresAt: $0["expires_at"])
            }
        }
    }

    public func recordLoginFailure(keys: [String], now: UnixMillis, expiresAt: UnixMillis) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM login_throttle WHERE expires_at <= ?", arguments: [now])
            for key in keys {
                try db.execute(
                    sql: """
                        INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (?, 1, ?, ?)
                        ON CONFLICT (key) DO UPDATE SET
                            failures = CASE WHEN login_throttle.expires_at > excluded.last_failure THEN login_throttle.failures + 1 ELSE 1 END,
                            last_failure = MAX(login_throttle.last_failure, excluded.last_failure),
                            expires_at = MAX(login_throttle.expires_at, excluded.expires_at)
                        """,
                    arguments: [key, now, expiresAt]
                )
            }
        }
    }

    public func recordLoginTrust(key: String, now: UnixMillis, expiresAt: UnixMillis) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM login_throttle WHERE expires_at <= ?", arguments: [now])
            try db.execute(
                sql: """
                    INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (?, 0, 0, ?)
                    ON CONFLICT (key) DO UPDATE SET expires_at = MAX(login_throttle.expires_at, excluded.expires_at)
                    """,
                arguments: [key, expiresAt]
            )
        }
    }
}
