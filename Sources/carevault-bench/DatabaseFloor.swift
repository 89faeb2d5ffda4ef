import Foundation
import GRDB
import Logging
import NIOCore
import PostgresNIO

/// One row of the floor table: the columns of the server's `versions` table, with an envelope blob of
/// the same size as the envelopes the server stored.
struct FloorRow: Sendable {
    var versionID: String
    var ownerID: UUID
    var recordID: String
    var tresorID: UUID
    var epoch: Int64
    var hlcPhysical: Int64
    var hlcCounter: Int64
    var hlcDevice: String
    var deleted: Bool
    var envelope: [UInt8]
}

/// Direct access to the benchmark's database, below CareVault: the floors of push and pull are plain
/// batched inserts into a fresh table and plain paged selects from it (Docs/benchmarks.md §2, §3).
protocol DatabaseFloor: Sendable {
    /// How many envelopes the server's `versions` table holds and their average stored size.
    func storedEnvelopes() async throws -> (count: Int, averageBytes: Int)
    /// Creates the fresh floor table (same columns as `versions`).
    func createTable() async throws
    /// Inserts `rows` in transactions of `batchSize` rows.
    func insert(_ rows: [FloorRow], batchSize: Int) async throws
    /// Selects every envelope of the floor table in pages (keyset on the primary key) and hands each to
    /// `process`; returns how many rows it read. A false from `process` is an error.
    func scan(pageSize: Int, _ process: @escaping @Sendable (UnsafeRawBufferPointer) -> Bool) async throws -> Int
}

/// The SQLite floor: GRDB on the same database file as the server (the same WAL mode and defaults).
final class SQLiteFloor: DatabaseFloor {
    let pool: DatabasePool

    init(path: String) throws {
        var config = Configuration()
        config.busyMode = .timeout(10)
        pool = try DatabasePool(path: path, configuration: config)
    }

    func storedEnvelopes() async throws -> (count: Int, averageBytes: Int) {
        try await pool.read { db in
            let row = try Row.fetchOne(db, sql: "SELECT COUNT(*), COALESCE(AVG(LENGTH(envelope)), 0) FROM versions")!
            return (row[0] as Int, Int((row[1] as Double).rounded()))
        }
    }

    func createTable() async throws {
        try await pool.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE bench_floor (
                        version_id TEXT PRIMARY KEY, owner_id TEXT NOT NULL, record_id TEXT NOT NULL, tresor_id TEXT NOT NULL,
                        epoch INTEGER NOT NULL, hlc_physical INTEGER NOT NULL, hlc_counter INTEGER NOT NULL, hlc_device TEXT NOT NULL,
                        deleted INTEGER NOT NULL, envelope BLOB NOT NULL)
                    """
            )
        }
    }

    func insert(_ rows: [FloorRow], batchSize: Int) async throws {
        for start in stride(from: 0, to: rows.count, by: batchSize) {
            let batch = Array(rows[start..<min(start + batchSize, rows.count)])
            try await pool.write { db in
                let statement = try db.cachedStatement(
                    sql: """
                        INSERT INTO bench_floor (version_id, owner_id, record_id, tresor_id, epoch, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """
                )
                for r in batch {
                    try statement.execute(arguments: [
                        r.versionID, r.ownerID.uuidString.lowercased(), r.recordID, r.tresorID.uuidString.lowercased(),
                        r.epoch, r.hlcPhysical, r.hlcCounter, r.hlcDevice, r.deleted, Data(r.envelope),
                    ])
                }
            }
        }
    }

    func scan(pageSize: Int, _ process: @escaping @Sendable (UnsafeRawBufferPointer) -> Bool) async throws -> Int {
        var last = ""
        var total = 0
        while true {
            let after = last
            let (n, next) = try await pool.read { db -> (Int, String) in
                let cursor = try Row.fetchCursor(
                    db,
                    sql: "SELECT version_id, envelope FROM bench_floor WHERE version_id > ? ORDER BY version_id LIMIT ?",
                    arguments: [after, pageSize]
                )
                var n = 0
                var next = after
                while let row = try cursor.next() {
                    n += 1
                    next = row[0]
                    let blob: Data = row[1]
                    guard blob.withUnsafeBytes(process) else { throw BenchError("floor row \(next) does not verify and open") }
                }
                return (n, next)
            }
            total += n
            last = next
            if n < pageSize { return total }
        }
    }
}

/// The PostgreSQL floor: postgres-nio on the same database as the server, inserts as one `unnest`
/// statement per batch inside a transaction.
final class PostgresFloor: DatabaseFloor {
    let client: PostgresClient
    let logger: Logger

    init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    func storedEnvelopes() async throws -> (count: Int, averageBytes: Int) {
        for try await (n, avg) in try await client.query(
            "SELECT COUNT(*)::BIGINT, COALESCE(AVG(octet_length(envelope)), 0)::FLOAT8 FROM versions",
            logger: logger
        ).decode((Int64, Double).self) {
            return (Int(n), Int(avg.rounded()))
        }
        return (0, 0)
    }

    func createTable() async throws {
        try await client.query(
            """
            CREATE TABLE bench_floor (
                version_id TEXT PRIMARY KEY, owner_id UUID NOT NULL, record_id TEXT NOT NULL, tresor_id UUID NOT NULL,
                epoch BIGINT NOT NULL, hlc_physical BIGINT NOT NULL, hlc_counter BIGINT NOT NULL, hlc_device TEXT NOT NULL,
                deleted BOOLEAN NOT NULL, envelope BYTEA NOT NULL)
            """,
            logger: logger
        )
    }

    func insert(_ rows: [FloorRow], batchSize: Int) async throws {
        let logger = self.logger
        for start in stride(from: 0, to: rows.count, by: batchSize) {
            let b = Array(rows[start..<min(start + batchSize, rows.count)])
            let envelopes = b.map { ByteBuffer(bytes: $0.envelope) }
            _ = try await client.withTransaction(logger: logger) { conn in
                try await conn.query(
                    """
                    INSERT INTO bench_floor (version_id, owner_id, record_id, tresor_id, epoch, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                    SELECT * FROM unnest(\(b.map(\.versionID)), \(b.map(\.ownerID)), \(b.map(\.recordID)), \(b.map(\.tresorID)), \(b.map(\.epoch)),
                                         \(b.map(\.hlcPhysical)), \(b.map(\.hlcCounter)), \(b.map(\.hlcDevice)), \(b.map(\.deleted)), \(envelopes))
                    """,
                    logger: logger
                )
            }
        }
    }

    func scan(pageSize: Int, _ process: @escaping @Sendable (UnsafeRawBufferPointer) -> Bool) async throws -> Int {
        var last = ""
        var total = 0
        while true {
            var n = 0
            let rows = try await client.query(
                "SELECT version_id, envelope FROM bench_floor WHERE version_id > \(last) ORDER BY version_id LIMIT \(pageSize)",
                logger: logger
            )
            for try await (id, blob) in rows.decode((String, ByteBuffer).self) {
                n += 1
                last = id
                guard blob.withUnsafeReadableBytes(process) else { throw BenchError("floor row \(id) does not verify and open") }
            }
            total += n
            if n < pageSize { return total }
        }
    }
}
