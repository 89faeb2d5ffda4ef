import Foundation
import VaultAPI
import VaultCore

/// The login back-off table's statements and its read-and-write (Docs/design.md §2), written once for both
/// engines. On PostgreSQL, shared by every instance on the database, each key's row is made (an expired
/// placeholder when new) and locked in key order before it is read: attempts racing on one key are decided
/// one after another, and two requests never wait for each other's keys in opposite orders. SQLite's single
/// writer gives the same order without the locks.
enum LoginThrottleSQL {
    static func live(_ keys: [String], now: UnixMillis) -> SQLStatement {
        "SELECT key, failures, last_failure, expires_at FROM login_throttle WHERE key IN \(SQLStatement.list(keys)) AND expires_at > \(now)"
    }

    static func placeholder(_ key: String) -> SQLStatement {
        "INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (\(key), 0, 0, 0) ON CONFLICT (key) DO NOTHING"
    }

    /// The rows of `keys`, live or not, in key order, locked.
    static func locked(_ keys: [String]) -> SQLStatement {
        "SELECT key, failures, last_failure, expires_at FROM login_throttle WHERE key IN \(SQLStatement.list(keys)) ORDER BY key\(forUpdate: .wait)"
    }

    static func put(_ w: LoginThrottleRow) -> SQLStatement {
        """
        INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (\(w.key), \(w.failures), \(w.lastFailure), \(w.expiresAt))
        ON CONFLICT (key) DO UPDATE SET
            failures = EXCLUDED.failures, last_failure = EXCLUDED.last_failure, expires_at = EXCLUDED.expires_at
        """
    }

    /// `LoginThrottleRepository.updateLoginThrottle`'s read, decision and writes, in the caller's
    /// transaction (after `sweep`, run outside it).
    static func update<T: Sendable>(
        _ sql: some SQLConnection,
        keys: [String],
        now: UnixMillis,
        _ decide: @Sendable ([LoginThrottleRow]) -> (writes: [LoginThrottleRow], result: T)
    ) async throws -> T {
        let sorted = Array(Set(keys)).sorted()
        for key in sorted { try await sql.execute(placeholder(key)) }
        let rows = try await sql.rows(LoginThrottleRow.self, locked(sorted)).filter { $0.expiresAt > now }
        let (writes, result) = decide(rows)
        for w in writes { try await sql.execute(put(w)) }
        return result
    }
}

/// The login back-off over either engine's `SQLStore`.
protocol SQLLoginThrottleStore: LoginThrottleRepository, SQLStore {}

extension SQLLoginThrottleStore {
    public func loginThrottle(keys: [String], now: UnixMillis) async throws -> [LoginThrottleRow] {
        try await rows(LoginThrottleRow.self, LoginThrottleSQL.live(keys, now: now))
    }

    public func updateLoginThrottle<T: Sendable>(
        keys: [String],
        now: UnixMillis,
        _ decide: @Sendable ([LoginThrottleRow]) -> (writes: [LoginThrottleRow], result: T)
    ) async throws -> T {
        // Up to a batch of expired rows first, skipping on PostgreSQL any another transaction holds (waiting
        // for them could deadlock with it).
        _ = try await deleted(RetentionSQL.loginThrottle(now: now, batch: RetentionSQL.loginSweepBatch))
        return try await transaction(conflict: nil) { sql in try await LoginThrottleSQL.update(sql, keys: keys, now: now, decide) }
    }
}

extension LoginThrottleRow: StoredRowDecodable {
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
