import ClinicAudit
import Foundation
import GRDB
import Logging
import PostgresNIO
import VaultServer

/// The clinic's database read directly, underneath the servers, for the final audit and the size figure.
enum ClinicDatabase {
    /// The database a server names: `sqlite:PATH` or a PostgreSQL URL. Every record of every owner with its
    /// head and version rows counted: a head without versions and versions without a head both show. The
    /// two counts are read apart and joined here; SQLite ran the full outer join of the two groupings for
    /// more than ten minutes at a million records without finishing.
    static func storedRecords(_ database: String) async throws -> [ClinicAudit.Stored] {
        ClinicAudit.stored(heads: try await countRows(database, Self.heads), versions: try await countRows(database, Self.versions))
    }

    static let heads = "SELECT owner_id, record_id, COUNT(*) FROM heads GROUP BY owner_id, record_id"
    static let versions = "SELECT owner_id, record_id, COUNT(*) FROM versions GROUP BY owner_id, record_id"

    /// The rows of one of the two counts.
    private static func countRows(_ database: String, _ query: String) async throws -> [ClinicAudit.Counted] {
        if database.hasPrefix("sqlite:") {
            let pool = try DatabasePool(path: String(database.dropFirst("sqlite:".count)))
            defer { try? pool.close() }
            return try await pool.read { db in
                var out: [ClinicAudit.Counted] = []
                let rows = try Row.fetchCursor(db, sql: query)
                while let row = try rows.next() {
                    let owner: String = row[0]
                    guard let id = UUID(uuidString: owner) else { throw BenchError("a stored owner id is not a UUID: \(owner)") }
                    out.append(.init(owner: id, recordID: row[1], n: row[2]))
                }
                return out
            }
        }
        return try await withPostgres(database) { client, logger in
            var out: [ClinicAudit.Counted] = []
            let rows = try await client.query(PostgresQuery(unsafeSQL: query), logger: logger)
            for try await (owner, record, n) in rows.decode((UUID, String, Int64).self) {
                out.append(.init(owner: owner, recordID: record, n: Int(n)))
            }
            return out
        }
    }

    /// The database's size in MiB: the SQLite file with its WAL, or `pg_database_size`.
    static func sizeMiB(_ database: String) async throws -> Double {
        if database.hasPrefix("sqlite:") {
            let path = String(database.dropFirst("sqlite:".count))
            var bytes = 0
            for suffix in ["", "-wal"] {
                let attributes = try? FileManager.default.attributesOfItem(atPath: path + suffix)
                bytes += (attributes?[.size] as? NSNumber)?.intValue ?? 0
            }
            return Double(bytes) / 1_048_576
        }
        return try await withPostgres(database) { client, logger in
            for try await n in try await client.query("SELECT pg_database_size(current_database())::BIGINT", logger: logger).decode(Int64.self) {
                return Double(n) / 1_048_576
            }
            throw BenchError("pg_database_size returned no row")
        }
    }

    /// Lets the database settle as it would between a bulk load and a working day: statistics up to date
    /// and dirty pages written (PostgreSQL `VACUUM ANALYZE` and `CHECKPOINT`; SQLite `ANALYZE` and a WAL
    /// checkpoint). The growth probe runs after it, both times, so it measures the data's size and not
    /// the load's aftermath (autovacuum and checkpoints of a million fresh rows).
    static func settle(_ database: String) async throws {
        if database.hasPrefix("sqlite:") {
            let queue = try DatabaseQueue(path: String(database.dropFirst("sqlite:".count)))
            defer { try? queue.close() }
            try await queue.writeWithoutTransaction { db in
                try db.execute(sql: "ANALYZE")
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            }
            return
        }
        try await withPostgres(database) { client, logger in
            _ = try await client.query("VACUUM ANALYZE", logger: logger)
            _ = try await client.query("CHECKPOINT", logger: logger)
        }
    }

    /// One statement's share of the database's time, from `pg_stat_statements`.
    struct Statement: Sendable {
        var calls: Int
        var totalMs: Double
        var meanMs: Double
        var query: String
    }

    /// The statements that took the most of PostgreSQL's time over the run (since its last restart:
    /// pg_stat_statements keeps its counts across a fast restart).
    /// Forgets PostgreSQL's statement times so far.
    static func resetStatements(_ url: String) async throws {
        try await withPostgres(url) { client, logger in
            _ = try await client.query("SELECT pg_stat_statements_reset()", logger: logger)
            return ()
        }
    }

    static func topStatements(_ url: String, limit: Int = 12) async throws -> [Statement] {
        try await withPostgres(url) { client, logger in
            var out: [Statement] = []
            let rows = try await client.query(
                """
                SELECT calls::BIGINT, total_exec_time::FLOAT8, mean_exec_time::FLOAT8, query FROM pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                ORDER BY total_exec_time DESC LIMIT \(limit)
                """,
                logger: logger
            )
            for try await (calls, total, mean, query) in rows.decode((Int64, Double, Double, String).self) {
                let oneLine = query.split(whereSeparator: \.isWhitespace).joined(separator: " ")
                out.append(Statement(calls: Int(calls), totalMs: total, meanMs: mean, query: String(oneLine.prefix(200))))
            }
            return out
        }
    }

    static func withPostgres<T: Sendable>(_ url: String, _ body: @escaping @Sendable (PostgresClient, Logger) async throws -> T) async throws -> T {
        let logger = BenchDatabase.logger
        let client = PostgresClient(configuration: try PostgresRepository.configuration(url: url), backgroundLogger: logger)
        let task = Task { await client.run() }
        defer { task.cancel() }
        return try await withDeadline(300, "reading the clinic's database") { try await body(client, logger) }
    }
}
