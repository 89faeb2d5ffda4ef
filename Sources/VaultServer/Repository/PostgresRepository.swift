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
public final class PostgresRepository: VaultRepository, SQLAccountStore, SQLLoginThrottleStore, SQLShareStore, SQLAuditStore,
    SQLListingStore, SQLRetentionStore, SQLIdempotencyStore
{
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
            // PostgreSQL's own answer (a missing privilege, say) is the same on every try: said as it was.
            if case let .failure(error)? = outcome, let refusal = DatabaseRefusal(error, during: "the migration") { throw refusal }
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
                if let compute = migration.compute { try await compute(PostgresSQL(connection: conn, logger: logger)) }
                try await conn.query(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (\(migration.id), \(Date().unixMillis))",
                    logger: logger
                )
            }
            let secret = ByteBuffer(bytes: RandomBytes.bytes(count: 32))
            try await conn.query("INSERT INTO meta (key, value) VALUES ('server_secret', \(secret)) ON CONFLICT (key) DO NOTHING", logger: logger)
        }
    }

    /// A hex digest of every migration's id and statements: names a migrated database that can be copied
    /// (the tests' template database) and changes whenever the schema does.
    public static var schemaDigest: String {
        var text = ""
        for migration in Schema.migrations(.postgres) { text += migration.id + "\n" + migration.statements.joined(separator: "\n") + "\n" }
        // 16 bytes is within BLAKE2b's output lengths: the hash cannot fail.
        return ((try? BLAKE2b.hash(Array(text.utf8), outputLength: 16)) ?? []).map { String(format: "%02x", $0) }.joined()
    }

    public func appliedMigrations() async throws -> Set<String> {
        let exists = "SELECT to_regclass('schema_migrations') IS NOT NULL"
        for try await found in try await client.query(PostgresQuery(unsafeSQL: exists), logger: logger).decode(Bool.self) where !found {
            return []
        }
        var names = Set<String>()
        for try await name in try await client.query("SELECT name FROM schema_migrations", logger: logger).decode(String.self) { names.insert(name) }
        return names
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
