import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import Testing
import VaultCore
import VaultServer

/// The storage backends every repository and API test runs on.
public enum Backend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite, postgres
    public var testDescription: String { rawValue }
}

/// Where the PostgreSQL tests find a server: `CAREVAULT_TEST_POSTGRES_URL`, which Scripts/test sets after
/// starting a throwaway cluster. Without it the PostgreSQL cases fail under CI (`CI` set) and are
/// reported as not run elsewhere.
public enum PostgresTestServer {
    public static var url: String? { ProcessInfo.processInfo.environment["CAREVAULT_TEST_POSTGRES_URL"] }
    public static var required: Bool { ProcessInfo.processInfo.environment["CI"] != nil }
}

public struct BackendUnavailable: Error, CustomStringConvertible {
    public var description: String
}

/// A fresh, migrated repository for one test, and how to throw it away.
public final class TestDatabase: Sendable {
    public let repository: any VaultRepository
    private let cleanup: @Sendable () async -> Void

    private init(repository: any VaultRepository, cleanup: @escaping @Sendable () async -> Void) {
        self.repository = repository
        self.cleanup = cleanup
    }

    /// Runs `body` with a new database of `backend`; the PostgreSQL case creates and drops its own database.
    /// Returns false (after recording why) when PostgreSQL is not configured and not required.
    @discardableResult
    public static func with(_ backend: Backend, _ body: (any VaultRepository) async throws -> Void) async throws -> Bool {
        guard let db = try await make(backend) else { return false }
        do {
            try await body(db.repository)
        } catch {
            await db.cleanup()
            throw error
        }
        await db.cleanup()
        return true
    }

    /// PostgreSQL client logs only errors, so test output stays readable.
    private static var quietLogger: Logger {
        var logger = Logger(label: "test-postgres")
        logger.logLevel = .error
        return logger
    }

    public static func make(_ backend: Backend) async throws -> TestDatabase? {
        switch backend {
        case .sqlite:
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-test-\(UUID().uuidString)")
            let repo = try SQLiteRepository(path: dir.appendingPathComponent("db.sqlite").path)
            try await repo.migrate()
            return TestDatabase(repository: repo) { try? FileManager.default.removeItem(at: dir) }
        case .postgres:
            guard let url = PostgresTestServer.url else {
                if PostgresTestServer.required {
                    throw BackendUnavailable(
                        description: "PostgreSQL tests are required under CI but CAREVAULT_TEST_POSTGRES_URL is not set "
                            + "(did Scripts/test start the cluster?)"
                    )
                }
                print("note: PostgreSQL backend NOT tested: set CAREVAULT_TEST_POSTGRES_URL (Scripts/test does this)")
                return nil
            }
            // Twice at most: see `SetupStalled`.
            do {
                return try await postgres(url: url)
            } catch let stalled as SetupStalled {
                FileHandle.standardError.write(Data("note: \(stalled); trying once more with new clients\n".utf8))
                return try await postgres(url: url)
            }
        }
    }

    /// A fresh database on the test cluster, migrated, with a client of its own: a copy of the migrated
    /// template (`PostgresTemplate`), so that setting one up is two statements rather than a whole migration
    /// (about 60 round trips, each waiting for the process's cooperative pool), with a server secret of its own.
    private static func postgres(url: String) async throws -> TestDatabase {
        let logger = Self.quietLogger
        let template = try await PostgresTemplate.shared.name(url: url)
        let name = "cv_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let adminConfig = try PostgresRepository.configuration(url: url)
        let admin = PostgresClient(configuration: adminConfig, backgroundLogger: logger)
        let adminTask = Task { await admin.run() }
        var config = adminConfig
        config.database = name
        let client = PostgresClient(configuration: config, backgroundLogger: logger)
        let task = Task { await client.run() }
        let repo = PostgresRepository(client: client, logger: logger)
        do {
            try await SetupStalled.deadline("CREATE DATABASE") {
                try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name) TEMPLATE \(template)"), logger: logger)
            }
            try await SetupStalled.deadline("the server secret") {
                let secret = ByteBuffer(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) })
                try await client.query("UPDATE meta SET value = \(secret) WHERE key = 'server_secret'", logger: logger)
            }
        } catch {
            task.cancel()
            adminTask.cancel()
            throw error
        }
        return TestDatabase(repository: repo) {
            // A cancelled `run()` has been seen never to return (see `SetupStalled`): waited for, not forever.
            task.cancel()
            await SetupStalled.noted("closing the test client", seconds: 15) { await task.value }
            await SetupStalled.noted("DROP DATABASE", seconds: 30) {
                _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
            }
            adminTask.cancel()
            await SetupStalled.noted("closing the admin client", seconds: 15) { await adminTask.value }
        }
    }
}

/// The migrated database every PostgreSQL test database of this process is copied from
/// (`CREATE DATABASE … TEMPLATE`), made once: named after the migrations it holds, so a cluster kept
/// between runs reuses it until the schema changes, and made under a temporary name then renamed, so a
/// half-made template is never copied. It accepts no connections once made (a template with a session
/// open cannot be copied). The migration itself stays tested on fresh databases (SchemaTests,
/// MultiInstanceTests, the CLI suites' servers).
actor PostgresTemplate {
    static let shared = PostgresTemplate()
    private var made: Task<String, any Error>?

    func name(url: String) async throws -> String {
        if let made { return try await made.value }
        let task = Task { try await SetupStalled.deadline("the template database", seconds: 180) { try await Self.make(url: url) } }
        made = task
        do { return try await task.value } catch {
            made = nil
            throw error
        }
    }

    /// `cv_template_` and the digest of the migrations it holds.
    static var templateName: String { "cv_template_" + PostgresRepository.schemaDigest }

    private static func make(url: String) async throws -> String {
        var logger = Logger(label: "test-postgres")
        logger.logLevel = .error
        let final = templateName
        let adminConfig = try PostgresRepository.configuration(url: url)
        let admin = PostgresClient(configuration: adminConfig, backgroundLogger: logger)
        let adminTask = Task { await admin.run() }
        defer { adminTask.cancel() }
        let count = { (name: String) async throws -> Int64 in
            try await admin.query("SELECT count(*)::int8 FROM pg_database WHERE datname = \(name)", logger: logger).decode(Int64.self)
                .reduce(0, +)
        }
        if try await count(final) > 0 { return final }
        let building = "cv_building_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(building)"), logger: logger)
        var config = adminConfig
        config.database = building
        let client = PostgresClient(configuration: config, backgroundLogger: logger)
        let task = Task { await client.run() }
        do {
            try await PostgresRepository(client: client, logger: logger).migrate()
        } catch {
            task.cancel()
            throw error
        }
        task.cancel()
        await SetupStalled.noted("closing the template's client", seconds: 15) { await task.value }
        try await admin.query(PostgresQuery(unsafeSQL: "ALTER DATABASE \(building) WITH ALLOW_CONNECTIONS false"), logger: logger)
        try await admin.query(
            PostgresQuery(unsafeSQL: "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(building)'"),
            logger: logger
        )
        do {
            try await admin.query(PostgresQuery(unsafeSQL: "ALTER DATABASE \(building) RENAME TO \(final)"), logger: logger)
        } catch {
            // Another process made it meanwhile: that one is used, this one dropped.
            _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(building) WITH (FORCE)"), logger: logger)
            guard try await count(final) > 0 else { throw error }
        }
        return final
    }
}

/// A step of setting up or throwing away a PostgreSQL test database that did not finish within its deadline.
///
/// Now and then a full run here never ended: a schema test waited forever with every thread of the
/// process idle and no connection to the cluster open, its database already dropped. What was left to
/// await was a cancelled `PostgresClient.run()` (postgres-nio 1.33.2) that had not returned; why is not
/// known. Each such step now has a deadline: set-up fails naming the step (and is tried once more with new
/// clients), and clean-up moves on, leaving the stalled task behind.
struct SetupStalled: Error, CustomStringConvertible {
    var step: String
    var seconds: Int
    var description: String { "PostgreSQL test database: \(step) did not finish in \(seconds) s" }

    /// `body` waited for at most `seconds`; a stall is noted on standard error, not thrown.
    static func noted(_ step: String, seconds: Int, _ body: @escaping @Sendable () async -> Void) async {
        do { try await deadline(step, seconds: seconds, body) } catch {
            FileHandle.standardError.write(Data("note: \(error); going on without it\n".utf8))
        }
    }

    /// `body`'s result, or `SetupStalled` after `seconds` (the stalled work is cancelled and left behind:
    /// a stalled wait may not answer its cancellation either).
    @discardableResult
    static func deadline<T: Sendable>(
        _ step: String,
        seconds: Int = 60,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let done = NIOLockedValueBox<CheckedContinuation<T, any Error>?>(nil)
        return try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
            done.withLockedValue { $0 = c }
            let finish: @Sendable (Result<T, any Error>) -> Void = { result in
                done.withLockedValue { pending in
                    pending?.resume(with: result)
                    pending = nil
                }
            }
            let work = Task {
                do { finish(.success(try await body())) } catch { finish(.failure(error)) }
            }
            let timer = Task {
                try await Task.sleep(for: .seconds(seconds))
                finish(.failure(SetupStalled(step: step, seconds: seconds)))
                work.cancel()
            }
            // The timer goes once the work is done, rather than sleeping out its minute.
            Task {
                _ = await work.result
                timer.cancel()
            }
        }
    }
}

/// A clock tests can move.
public final class TestClock: Sendable {
    public init() {}
    private let now = NIOLockedValueBox<UnixMillis>(Date().unixMillis)
    public var millis: UnixMillis { now.withLockedValue { $0 } }
    public func advance(by ms: UnixMillis) { now.withLockedValue { $0 += ms } }
    public var function: @Sendable () -> UnixMillis { { [self] in self.millis } }
}

extension VaultRepository {
    /// Raw SQL as an attacker with database access would run it (tests only).
    public func attackerExecutes(_ sql: String) async throws {
        if let r = self as? SQLiteRepository {
            try await r.executeRawSQL(sql)
        } else if let r = self as? PostgresRepository {
            try await r.executeRawSQL(sql)
        }
    }
}
