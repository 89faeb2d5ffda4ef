import Foundation
import Logging
import ServiceLifecycle
import VaultCore

/// The periodic clean-up of rows that only grow (Docs/operations.md §6 "Retention"): `firstRunAfter` the
/// start (once the migrations have run) and then every `interval`,
/// expired sessions, login back-off rows past their window and admin request signatures older than the
/// replay window needs are deleted, `batch` rows of each table per statement and at most `maxBatches`
/// statements per table and run, so no run holds a lock long. Every instance runs it; on a shared
/// PostgreSQL database the runs skip each other's rows (`RetentionRepository`).
public struct RetentionService: Service {
    /// When the first run starts, how often one starts after it, how many rows one statement deletes, how
    /// many statements one run makes.
    public struct Schedule: Sendable {
        public var firstRunAfter: Duration
        public var interval: Duration
        public var batch: Int
        public var maxBatches: Int
        public init(firstRunAfter: Duration = .seconds(60), interval: Duration = .seconds(300), batch: Int = 1_000, maxBatches: Int = 50) {
            self.firstRunAfter = firstRunAfter
            self.interval = interval
            self.batch = max(1, batch)
            self.maxBatches = max(1, maxBatches)
        }
    }

    let repository: any RetentionRepository
    let schedule: Schedule
    let clock: @Sendable () -> UnixMillis
    let logger: Logger

    public init(
        repository: any RetentionRepository,
        schedule: Schedule = .init(),
        clock: @escaping @Sendable () -> UnixMillis = { Date().unixMillis },
        logger: Logger
    ) {
        self.repository = repository
        self.schedule = schedule
        self.clock = clock
        self.logger = logger
    }

    /// Runs until the graceful shutdown; a failed run (the database away) is logged and the next one tries again.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            if (try? await Task.sleep(for: schedule.firstRunAfter)) == nil { return }
            while !Task.isCancelled {
                do {
                    let purged = try await runOnce()
                    if purged.total > 0 {
                        logger.info(
                            "retention deleted rows",
                            metadata: [
                                "sessions": "\(purged.sessions)", "login_throttle": "\(purged.loginThrottle)",
                                "admin_signatures": "\(purged.adminSignatures)",
                                "idempotency_keys": "\(purged.idempotencyKeys)",
                            ]
                        )
                    }
                } catch is CancellationError {
                    return
                } catch {
                    // PostgreSQL's own words when it answered; otherwise only the error's type (no driver text).
                    let detail = DatabaseRefusal(error, during: "the retention run").map { "\($0)" } ?? String(reflecting: type(of: error))
                    logger.warning("retention run failed", metadata: ["error": "\(detail)"])
                }
                if (try? await Task.sleep(for: schedule.interval)) == nil { return }
            }
        }
    }

    /// One run: batches until every table's last one came back short, or `maxBatches` of them.
    @discardableResult
    public func runOnce() async throws -> PurgedRows {
        var total = PurgedRows()
        for _ in 0..<schedule.maxBatches {
            try Task.checkCancellation()
            let now = clock()
            let purged = try await repository.purgeExpired(
                now: now,
                adminSignaturesBefore: now - Self.adminSignatureRetentionMs,
                batch: schedule.batch
            )
            total.sessions += purged.sessions
            total.loginThrottle += purged.loginThrottle
            total.adminSignatures += purged.adminSignatures
            total.idempotencyKeys += purged.idempotencyKeys
            if max(purged.sessions, purged.loginThrottle, purged.adminSignatures, purged.idempotencyKeys) < schedule.batch { break }
        }
        return total
    }

    /// How long an admin request signature is kept: twice the window in which a signed request is
    /// accepted, as `AdminSignatureAuthenticator` keeps it, so a replay inside the window is still caught,
    /// and 2 minutes more for instances whose clocks differ (one ahead would otherwise delete a signature
    /// another still accepts a replay of).
    public static let adminSignatureRetentionMs = 2 * AdminRequestSignature.windowMs + 120_000
}
