import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO
import ServiceLifecycle
import VaultAPI
import VaultCore
import VaultCrypto

/// The repository's PostgreSQL client, which turns an outage into prompt `RepositoryError.unavailable`
/// (503 with Retry-After) and recovers as soon as the database is back (Docs/design.md §7).
///
/// postgres-nio's pool alone does neither: while it cannot connect it queues every request until its
/// circuit breaker opens (a minute later), and its reconnection back-off keeps failing requests for up
/// to a minute after the database returns. So a watch connection outside the pool checks the database
/// every `checkInterval` (and notices a closed socket at once); when the watch fails the pool is
/// retired, which fails its queued requests, and a fresh one takes its place. Until the watch connects
/// again every request fails at once, without touching the pool; the fresh pool has no back-off to
/// wait out. A pool made with `init(fixed:)` (tests, benchmarks) has no watch and is used as it is.
public final class PostgresPool: Service, Sendable {
    /// How quickly an outage is noticed and the end of one is found.
    public struct Timing: Sendable {
        /// A TCP connection to the database that takes longer has failed.
        public var connectTimeout: Duration = .seconds(2)
        /// How often the watch connection runs `SELECT 1`.
        public var checkInterval: Duration = .seconds(1)
        /// A check that takes longer has failed (a database or network that stopped answering).
        public var checkDeadline: Duration = .seconds(5)
        /// How long to wait between attempts to reconnect the watch during an outage.
        public var retryInterval: Duration = .milliseconds(250)
        /// The default timing.
        public init() {}
    }

    private struct State {
        var client: PostgresClient
        var runner: Task<Void, Never>?
        var available = true
        /// Set once `run()` ended: the pool is not started again.
        var stopped = false
    }

    private let configuration: PostgresClient.Configuration?
    /// The watch connects with the pool's TLS settings (`PostgresTLS`), so it fails when the pool would.
    private let watchTLS: PostgresConnection.Configuration.TLS
    private let timing: Timing
    private let logger: Logger
    private let state: NIOLockedValueBox<State>

    /// A pool over `client`, which the caller runs; no watch, no replacement.
    init(fixed client: PostgresClient) {
        configuration = nil
        watchTLS = .disable
        timing = Timing()
        logger = Logger(label: "carevault-postgres")
        state = NIOLockedValueBox(State(client: client))
    }

    /// A pool for `configuration`, its watch connecting with `watchTLS`; it connects once `run()` runs.
    public init(
        configuration: PostgresClient.Configuration,
        watchTLS: PostgresConnection.Configuration.TLS = .disable,
        timing: Timing = Timing(),
        logger: Logger
    ) {
        self.configuration = configuration
        self.watchTLS = watchTLS
        self.timing = timing
        self.logger = logger
        state = NIOLockedValueBox(State(client: PostgresClient(configuration: configuration, backgroundLogger: logger)))
    }

    /// Whether the last check found the database answering (true until a check says otherwise).
    public var isAvailable: Bool { state.withLockedValue { $0.available } }

    /// The client to use now; during an outage, `RepositoryError.unavailable` at once.
    private func current() throws -> PostgresClient {
        try state.withLockedValue { s in
            guard s.available else { throw RepositoryError.unavailable("PostgreSQL is not answering") }
            // Work before the service group ran the pool (the migration at start) starts the driver's run
            // itself, instead of queueing behind a run() not called yet (which postgres-nio warns about). The
            // run begins at once, on this thread, up to its first wait: the driver counts as running before
            // the caller asks it for a connection.
            if configuration != nil, s.runner == nil, !s.stopped {
                let client = s.client
                s.runner = Task.immediate { await client.run() }
            }
            return s.client
        }
    }

    /// Runs `query` on a pooled connection.
    @discardableResult
    func query(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence {
        try await current().query(query, logger: logger)
    }

    /// Runs `body` in a transaction on a pooled connection.
    func withTransaction<R: Sendable>(logger: Logger, _ body: (PostgresConnection) async throws -> R) async throws -> R {
        try await current().withTransaction(logger: logger) { conn in try await body(conn) }
    }

    /// Runs the pool and its watch until cancelled or shut down gracefully.
    public func run() async throws {
        guard let configuration else { return }
        state.withLockedValue { s in
            guard s.runner == nil, !s.stopped else { return }
            let client = s.client
            s.runner = Task.immediate { await client.run() }
        }
        await cancelWhenGracefulShutdown { await self.watch(configuration) }
        let runner = state.withLockedValue { s in
            defer {
                s.runner = nil
                s.stopped = true
            }
            return s.runner
        }
        guard let runner else { return }
        runner.cancel()
        // A stopping server must stop: if the driver's pool does not end within the limit (it may be
        // reconnecting to a database that is down), the process goes on without waiting for it.
        if await Deadline.value(of: runner, within: .seconds(10)) == nil {
            logger.warning("the PostgreSQL pool did not stop within 10 seconds; shutting down without it")
        }
    }

    private func watch(_ configuration: PostgresClient.Configuration) async {
        var connection = PostgresTLS.singleConnection(configuration, tls: watchTLS)
        connection.options.connectTimeout = TimeAmount(timing.connectTimeout)
        while !Task.isCancelled {
            if let conn = try? await PostgresConnection.connect(configuration: connection, id: 0, logger: logger) {
                if await responds(conn) {
                    markAvailable()
                    await watch(conn)
                    // The watch connection failed a check or closed: a fresh connection decides. A database
                    // that is only slow (a loaded machine, a long migration) takes it and answers, and the
                    // pool with its work in flight is left alone; retiring it would cut that work off.
                    Task { try? await conn.close() }
                    continue
                }
                Task { try? await conn.close() }
            }
            if Task.isCancelled { return }
            markUnavailable(configuration)
            try? await Task.sleep(for: timing.retryInterval)
        }
    }

    /// Returns when `conn` closes or stops answering (or on cancellation). Nothing here awaits the driver
    /// without a limit: a connection to a database that vanished may never complete a query or a close.
    private func watch(_ conn: PostgresConnection) async {
        var sinceCheck = Duration.zero
        let step = Duration.milliseconds(100)
        while (try? await Task.sleep(for: step)) != nil, !conn.isClosed {
            sinceCheck += step
            guard sinceCheck >= timing.checkInterval else { continue }
            sinceCheck = .zero
            guard await responds(conn) else { break }
        }
        Task { try? await conn.close() }
    }

    /// Whether `SELECT 1` answers within the deadline; a connection that does not is closed.
    private func responds(_ conn: PostgresConnection) async -> Bool {
        let logger = self.logger
        let query = Task { () -> Bool in
            do {
                for try await _ in try await conn.query("SELECT 1", logger: logger) {}
                return true
            } catch { return false }
        }
        let answered = await Deadline.value(of: query, within: timing.checkDeadline) ?? false
        if !answered {
            query.cancel()
            Task { try? await conn.close() }
        }
        return answered
    }

    private func markAvailable() {
        let changed = state.withLockedValue { s in
            defer { s.available = true }
            return !s.available
        }
        if changed { logger.notice("PostgreSQL answers again") }
    }

    /// Retires the pool (failing what waits in it) and starts a fresh one, once per outage.
    private func markUnavailable(_ configuration: PostgresClient.Configuration) {
        let retired: Task<Void, Never>? = state.withLockedValue { s in
            guard s.available else { return nil }
            s.available = false
            let old = s.runner
            let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
            s.client = client
            s.runner = Task.immediate { await client.run() }
            return old
        }
        guard let retired else { return }
        logger.error("PostgreSQL is not answering; requests get 503 until it does")
        retired.cancel()
    }
}
