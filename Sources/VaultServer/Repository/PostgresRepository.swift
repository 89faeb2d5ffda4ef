import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO
import ServiceLifecycle
import VaultAPI
import VaultCore
import VaultCrypto

/// The production backend: PostgreSQL through a pooled postgres-nio client. Stateless apart from the
/// database, so several server instances can share one PostgreSQL. Each owner's pushes take that
/// owner's row lock in `owner_sequences`, so change sequences commit in order and a cursor never skips.
public final class PostgresRepository: VaultRepository {
    public let backendName = "postgres"
    /// The store waits for every chunk (see `storeVersions`).
    public let streamsPushes = false
    let client: PostgresPool
    let logger: Logger

    /// Wraps a client; the client must be running (`client.run()`, or as a service of the application).
    public init(client: PostgresClient, logger: Logger) {
        self.client = PostgresPool(fixed: client)
        self.logger = logger
    }

    /// Uses `pool`, which must run as a service of the application: it answers promptly during an outage.
    public init(pool: PostgresPool, logger: Logger) {
        self.client = pool
        self.logger = logger
    }

    /// Parses `postgres://user:password@host:port/database[?sslmode=…&sslrootcert=FILE]` into a client configuration.
    public static func configuration(url text: String) throws -> PostgresClient.Configuration {
        try settings(url: text).0
    }

    /// The client configuration of `url` and the TLS settings it was made with (`PostgresTLS`).
    static func settings(url text: String) throws -> (PostgresClient.Configuration, PostgresTLS) {
        guard let url = URLComponents(string: text), url.scheme == "postgres" || url.scheme == "postgresql",
            let host = url.host, !host.isEmpty, let user = url.user, !user.isEmpty
        else { throw ConfigurationError.invalid("database URL must look like postgres://user:password@host:port/database") }
        let database = url.path.hasPrefix("/") ? String(url.path.dropFirst()) : url.path
        let tls = try PostgresTLS(query: url.queryItems ?? [], host: host)
        var config = PostgresClient.Configuration(
            host: host,
            port: url.port ?? 5432,
            username: user,
            password: url.password,
            database: database.isEmpty ? nil : database,
            tls: try tls.clientTLS()
        )
        config.options.maximumConnections = 16
        config.options.minimumConnections = 0
        // A database that does not answer is an outage to report within seconds (503), not a hang.
        config.options.connectTimeout = PostgresPool.Timing().connectTimeout
        return (config, tls)
    }

    // MARK: Schema

    /// Migrates, each try bounded in time and retried twice. When the watch finds the database slow to
    /// answer (a loaded machine at start-up), it retires the pool and cuts the migration's connection
    /// mid-transaction; the driver may then fail the migration or never finish it, and the server would
    /// not start or would hang. A try that fails or has not ended within 45 seconds is left, and the
    /// migration runs again on the pool now in use: the advisory lock and `schema_migrations` make a
    /// repeat safe, and a cut connection's transaction was rolled back with its lock.
    public func migrate() async throws {
        var attempt = 1
        while true {
            let run = Task { () -> Result<Void, any Error> in
                do { return .success(try await self.migrateOnce()) } catch { return .failure(error) }
            }
            let outcome = await Deadline.value(of: run, within: .seconds(45))
            if case .success? = outcome { return }
            run.cancel()
            guard attempt < 3 else {
                if case let .failure(error)? = outcome { throw error }
                throw RepositoryError.unavailable("the PostgreSQL migration did not finish within 45 seconds")
            }
            logger.warning("the PostgreSQL migration did not finish; trying again", metadata: ["attempt": "\(attempt)"])
            attempt += 1
            try await Task.sleep(for: .seconds(1))
        }
    }

    private func migrateOnce() async throws {
        try await transaction { conn in
            // One instance migrates at a time; the others wait here and then find nothing to do.
            try await conn.query("SELECT pg_advisory_xact_lock(7262737)", logger: logger)
            try await conn.query("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)", logger: logger)
            var applied = Set<String>()
            for try await name in try await conn.query("SELECT name FROM schema_migrations", logger: logger).decode(String.self) {
                applied.insert(name)
            }
            for migration in Schema.migrations(.postgres) where !applied.contains(migration.id) {
                for statement in migration.statements {
                    try await conn.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await conn.query(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (\(migration.id), \(Date().unixMillis))",
                    logger: logger
                )
            }
            let secret = ByteBuffer(bytes: RandomBytes.bytes(count: 32))
            try await conn.query("INSERT INTO meta (key, value) VALUES ('server_secret', \(secret)) ON CONFLICT (key) DO NOTHING", logger: logger)
        }
    }

    public func serverSecret() async throws -> [UInt8] {
        for try await value in try await client.query("SELECT value FROM meta WHERE key = 'server_secret'", logger: logger).decode(ByteBuffer.self) {
            return Array(value.readableBytesView)
        }
        throw RepositoryError.notFound("server secret (database not migrated)")
    }

    /// `SELECT 1`, answered within 2 seconds or reported unavailable (readiness must answer promptly).
    public func ping() async throws {
        let (client, logger) = (self.client, self.logger)
        let query = Task { () -> Bool in (try? await client.query("SELECT 1", logger: logger)) != nil }
        guard await Deadline.value(of: query, within: .seconds(2)) == true else {
            query.cancel()
            throw RepositoryError.unavailable("PostgreSQL did not answer within 2 seconds")
        }
    }

    /// Runs raw SQL outside the repository's rules: for maintenance, and for tests that play an attacker
    /// with write access to the database.
    public func executeRawSQL(_ sql: String) async throws {
        for statement in sql.components(separatedBy: ";").map({ $0.trimmingCharacters(in: .whitespacesAndNewlines) }) where !statement.isEmpty {
            try await client.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
    }

    // MARK: Shared helpers

    static func isUniqueViolation(_ error: Error) -> Bool {
        (error as? PSQLError)?.serverInfo?[.sqlState] == "23505"
    }

    /// Runs `body` in a transaction and reports the error the body threw (postgres-nio wraps it), so both
    /// backends throw the same `RepositoryError`s.
    func transaction<R: Sendable>(_ body: (PostgresConnection) async throws -> R) async throws -> R {
        do {
            return try await client.withTransaction(logger: logger) { conn in try await body(conn) }
        } catch let e as PostgresTransactionError {
            if let inner = e.closureError { throw inner }
            if let begin = e.beginError { throw begin }
            throw RepositoryError.unavailable("transaction failed: \(e.commitError.map { "\(type(of: $0))" } ?? "unknown")")
        }
    }

    /// Rows of `query` decoded as `R`, inside `conn`'s transaction when given.
    func all<R: StoredRowDecodable>(_ type: R.Type, _ query: PostgresQuery, on conn: PostgresConnection? = nil) async throws -> [R] {
        let rows = if let conn { try await conn.query(query, logger: logger) } else { try await client.query(query, logger: logger) }
        var out: [R] = []
        for try await row in rows { out.append(try R(stored: row.makeRandomAccess())) }
        return out
    }

    /// Appends audit events inside the caller's transaction, chained onto the recorded head.
    func appendAudit(_ conn: PostgresConnection, _ events: [AuditEvent], now: UnixMillis) async throws {
        guard !events.isEmpty else { return }
        // The head row's lock orders concurrent appenders; after waiting, READ COMMITTED re-reads the row.
        guard let head = try await all(AuditHeadRow.self, "SELECT sequence, hash FROM audit_head WHERE id = 1 FOR UPDATE", on: conn).first else {
            throw RepositoryError.notFound("audit head")
        }
        var patientHeads: [UUID: String] = [:]
        for p in AuditBuilder.patients(events) {
            let sql: PostgresQuery = "SELECT hash FROM audit_log WHERE patient_id = \(p) ORDER BY sequence DESC LIMIT 1"
            for try await hash in try await conn.query(sql, logger: logger).decode(String.self) { patientHeads[p] = hash }
        }
        var secret: [UInt8]?
        let read: PostgresQuery = "SELECT value FROM meta WHERE key = 'server_secret'"
        for try await value in try await conn.query(read, logger: logger).decode(ByteBuffer.self) { secret = Array(value.readableBytesView) }
        guard let secret else { throw RepositoryError.notFound("server secret (database not migrated)") }
        let entries = try AuditBuilder.entries(
            for: events,
            after: (head.sequence, head.hash),
            patientHeads: patientHeads,
            serverSecret: secret,
            now: now
        )
        for e in entries {
            let details = try RowJSON.encode(e.details)
            let (format, digest) = (Int64(e.entryFormat), AuditChain.digest(of: e))
            try await conn.query(
                """
                INSERT INTO audit_log (sequence, at, actor, action, patient_id, details, previous_hash, hash, format, digest, patient_link)
                VALUES (\(Int64(e.sequence)), \(e.at), \(e.actor), \(e.action), \(e.patientID), \(details), \(e.previousHash), \(e.hash),
                \(format), \(digest), \(e.patientLink))
                """,
                logger: logger
            )
        }
        let last = entries.last!
        try await conn.query("UPDATE audit_head SET sequence = \(Int64(last.sequence)), hash = \(last.hash) WHERE id = 1", logger: logger)
    }
}

/// PostgreSQL has native UUID, BOOLEAN and BYTEA columns; a missing column is a programming error.
extension PostgresRandomAccessRow: StoredRow {
    func string(_ column: String) throws -> String { try self[column].decode(String.self) }
    func optionalString(_ column: String) throws -> String? { try self[column].decode(String?.self) }
    func int64(_ column: String) throws -> Int64 { try self[column].decode(Int64.self) }
    func optionalInt64(_ column: String) throws -> Int64? { try self[column].decode(Int64?.self) }
    func uuid(_ column: String) throws -> UUID { try self[column].decode(UUID.self) }
    func optionalUUID(_ column: String) throws -> UUID? { try self[column].decode(UUID?.self) }
    func bool(_ column: String) throws -> Bool { try self[column].decode(Bool.self) }
    func bytes(_ column: String) throws -> [UInt8] { Array(try self[column].decode(ByteBuffer.self).readableBytesView) }
}

/// Builds a bind list for `PostgresQuery(unsafeSQL:binds:)` from encodable values.
func binds(_ values: any PostgresEncodable...) -> PostgresBindings {
    var b = PostgresBindings()
    for v in values { try! b.append(v) }
    return b
}

/// A configuration that cannot work.
public enum ConfigurationError: Error, CustomStringConvertible {
    case invalid(String)
    public var description: String {
        switch self {
        case let .invalid(m): return m
        }
    }
}

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
            let client = s.client
            s.runner = Task { await client.run() }
        }
        await cancelWhenGracefulShutdown { await self.watch(configuration) }
        let runner = state.withLockedValue { s in
            defer { s.runner = nil }
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
            s.runner = Task { await client.run() }
            return old
        }
        guard let retired else { return }
        logger.error("PostgreSQL is not answering; requests get 503 until it does")
        retired.cancel()
    }
}
