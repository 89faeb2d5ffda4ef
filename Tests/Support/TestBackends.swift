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
            let logger = Self.quietLogger
            let name = "cv_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            let adminConfig = try PostgresRepository.configuration(url: url)
            let admin = PostgresClient(configuration: adminConfig, backgroundLogger: logger)
            let adminTask = Task { await admin.run() }
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
            var config = adminConfig
            config.database = name
            let client = PostgresClient(configuration: config, backgroundLogger: logger)
            let task = Task { await client.run() }
            let repo = PostgresRepository(client: client, logger: logger)
            try await repo.migrate()
            return TestDatabase(repository: repo) {
                task.cancel()
                _ = await task.result
                _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
                adminTask.cancel()
                _ = await adminTask.result
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
