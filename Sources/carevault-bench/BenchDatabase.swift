import Foundation
import Logging
import PostgresNIO
import VaultServer

enum BackendKind: String, CaseIterable, Sendable {
    case sqlite, postgres
    var label: String { self == .sqlite ? "SQLite" : "PostgreSQL" }
}

/// A fresh, migrated CareVault database for one benchmark, with direct access to the same database
/// for the floors, and how to throw it away. SQLite: a new file under the run's folder. PostgreSQL: a
/// new database created (and dropped afterwards) on the server CAREVAULT_TEST_POSTGRES_URL names.
final class BenchDatabase: Sendable {
    let kind: BackendKind
    let repository: any VaultRepository
    let floor: any DatabaseFloor
    /// The database as a server process's `--database` names it.
    let url: String?
    private let cleanup: @Sendable () async -> Void

    private init(
        kind: BackendKind,
        repository: any VaultRepository,
        floor: any DatabaseFloor,
        url: String?,
        cleanup: @escaping @Sendable () async -> Void
    ) {
        self.kind = kind
        self.repository = repository
        self.floor = floor
        self.url = url
        self.cleanup = cleanup
    }

    static let logger: Logger = {
        var l = Logger(label: "carevault-bench-db")
        l.logLevel = .error
        return l
    }()

    /// The PostgreSQL server to use, if any.
    static var postgresURL: String? {
        ProcessInfo.processInfo.environment["CAREVAULT_TEST_POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    static func make(_ kind: BackendKind, root: URL) async throws -> BenchDatabase {
        switch kind {
        case .sqlite: return try await sqlite(in: root.appendingPathComponent("db-\(shortID())"))
        case .postgres:
            guard let url = postgresURL else { throw BenchError("CAREVAULT_TEST_POSTGRES_URL is not set") }
            return try await postgres(url: url)
        }
    }

    static func sqlite(in dir: URL) async throws -> BenchDatabase {
        let path = dir.appendingPathComponent("carevault.sqlite").path
        let repo = try SQLiteRepository(path: path)
        try await repo.migrate()
        return BenchDatabase(kind: .sqlite, repository: repo, floor: try SQLiteFloor(path: path), url: "sqlite:" + path) {
            try? FileManager.default.removeItem(at: dir)
        }
    }

    static func postgres(url: String) async throws -> BenchDatabase {
        let logger = Self.logger
        let name = "cvbench_" + shortID() + shortID()
        let adminConfig = try PostgresRepository.configuration(url: url)
        let admin = PostgresClient(configuration: adminConfig, backgroundLogger: logger)
        let adminTask = Task { await admin.run() }
        do {
            try await withDeadline(20, "connecting to PostgreSQL") {
                _ = try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
            }
        } catch {
            adminTask.cancel()
            throw error
        }
        var config = adminConfig
        config.database = name
        let client = PostgresClient(configuration: config, backgroundLogger: logger)
        let task = Task { await client.run() }
        let dropAll: @Sendable () async -> Void = {
            task.cancel()
            _ = await task.result
            _ = try? await withDeadline(30, "dropping the benchmark database") {
                _ = try await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
            }
            adminTask.cancel()
            _ = await adminTask.result
        }
        let repo = PostgresRepository(client: client, logger: logger)
        do {
            try await withDeadline(60, "migrating the PostgreSQL database") { try await repo.migrate() }
        } catch {
            await dropAll()
            throw error
        }
        var components = URLComponents(string: url)
        components?.path = "/" + name
        return BenchDatabase(
            kind: .postgres,
            repository: repo,
            floor: PostgresFloor(client: client, logger: logger),
            url: components?.string,
            cleanup: dropAll
        )
    }

    func close() async { await cleanup() }
}

/// Runs `body` with a fresh database of `kind` and always throws the database away afterwards.
func withDatabase<T: Sendable>(_ kind: BackendKind, root: URL, _ body: (BenchDatabase) async throws -> T) async throws -> T {
    try await using(try await BenchDatabase.make(kind, root: root), release: { await $0.close() }, body)
}
