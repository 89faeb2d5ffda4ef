import Foundation
import VaultAPI
import VaultCore

/// How many rows one retention batch deleted, per table.
public struct PurgedRows: Sendable, Equatable {
    /// Sessions past their expiry.
    public var sessions = 0
    /// Login back-off rows past their window (`expires_at`).
    public var loginThrottle = 0
    /// Admin request signatures older than the replay window needs (`admin_signatures`).
    public var adminSignatures = 0
    /// Idempotency keys first seen more than `IdempotencyKeys.retention` ago (`idempotency_keys`).
    public var idempotencyKeys = 0
    public init(sessions: Int = 0, loginThrottle: Int = 0, adminSignatures: Int = 0, idempotencyKeys: Int = 0) {
        self.sessions = sessions
        self.loginThrottle = loginThrottle
        self.adminSignatures = adminSignatures
        self.idempotencyKeys = idempotencyKeys
    }
    /// The rows of every table.
    public var total: Int { sessions + loginThrottle + adminSignatures + idempotencyKeys }
}

/// The deletion of rows that only grow and stop mattering at a known time (Docs/operations.md "Retention").
public protocol RetentionRepository: Sendable {
    /// Deletes up to `batch` rows of each table that no longer matter at `now`: sessions expired by then,
    /// login back-off rows whose window has passed, admin request signatures seen before
    /// `adminSignaturesBefore`, idempotency keys first seen `IdempotencyKeys.retention` before `now`. Each table's batch is one short statement; on PostgreSQL rows another
    /// transaction holds are skipped (left for a later run), so two instances running it at once neither
    /// wait for each other nor delete a row twice.
    func purgeExpired(now: UnixMillis, adminSignaturesBefore: UnixMillis, batch: Int) async throws -> PurgedRows
}

/// The batched deletions, written once for both engines.
enum RetentionSQL {
    /// How many expired rows of other accounts a login deletes on its way (sessions, back-off rows): bounded,
    /// so a login never pays for a backlog; the retention purge takes the rest.
    static let loginSweepBatch = 64

    static func sessions(now: UnixMillis, batch: Int) -> SQLStatement {
        """
        DELETE FROM sessions WHERE token_hash IN (
            SELECT token_hash FROM sessions WHERE expires_at <= \(now) LIMIT \(Int64(batch))\(forUpdate: .skipLocked))
        RETURNING token_hash AS value
        """
    }

    static func loginThrottle(now: UnixMillis, batch: Int) -> SQLStatement {
        """
        DELETE FROM login_throttle WHERE key IN (
            SELECT key FROM login_throttle WHERE expires_at <= \(now) LIMIT \(Int64(batch))\(forUpdate: .skipLocked))
        RETURNING key AS value
        """
    }

    static func adminSignatures(before: UnixMillis, batch: Int) -> SQLStatement {
        """
        DELETE FROM admin_signatures WHERE signature IN (
            SELECT signature FROM admin_signatures WHERE seen_at < \(before) LIMIT \(Int64(batch))\(forUpdate: .skipLocked))
        RETURNING signature AS value
        """
    }
}

/// The retention over either engine's `SQLStore`.
protocol SQLRetentionStore: RetentionRepository, SQLStore {}

extension SQLRetentionStore {
    public func purgeExpired(now: UnixMillis, adminSignaturesBefore: UnixMillis, batch: Int) async throws -> PurgedRows {
        let n = max(1, batch)
        return PurgedRows(
            sessions: try await deleted(RetentionSQL.sessions(now: now, batch: n)),
            loginThrottle: try await deleted(RetentionSQL.loginThrottle(now: now, batch: n)),
            adminSignatures: try await deleted(RetentionSQL.adminSignatures(before: adminSignaturesBefore, batch: n)),
            idempotencyKeys: try await transaction(conflict: nil) { sql in
                try await sql.rows(StoredNumber.self, IdempotencySQL.expired(before: now - IdempotencyKeys.retention, batch: n)).count
            }
        )
    }
}

extension SQLStore {
    /// Runs one batch's `DELETE … RETURNING` in a write of its own; the number of rows it deleted.
    func deleted(_ statement: SQLStatement) async throws -> Int {
        try await transaction(conflict: nil) { sql in try await sql.rows(StoredText.self, statement).count }
    }
}
