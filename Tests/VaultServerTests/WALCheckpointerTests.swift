import Foundation
import GRDB
import Testing
import VaultSQLite

@testable import VaultServer

/// The WAL is copied back into the database file off the writer's commits (`WALCheckpointer`), and
/// stays bounded when that cannot happen in the background.
@Suite("SQLite: checkpoints run beside the writer")
struct WALCheckpointerTests {
    private static func folder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("wal-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    private static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
    }

    /// Writes about `megabytes` MiB through `pool`, in transactions of 256 KiB, calling `pause` after each MiB.
    private static func fill(_ pool: DatabasePool, megabytes: Int, pause: () async throws -> Void = {}) async throws {
        try await pool.write { db in try db.execute(sql: "CREATE TABLE IF NOT EXISTS filler (id INTEGER PRIMARY KEY, bytes BLOB NOT NULL)") }
        for i in 0..<(megabytes * 4) {
            try await pool.write { db in
                for _ in 0..<64 { try db.execute(sql: "INSERT INTO filler (bytes) VALUES (randomblob(4096))") }
            }
            if i % 4 == 3 { try await pause() }
        }
    }

    @Test func theServersWritesReachTheDatabaseFileWithoutACommitCheckpointing() async throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("db.sqlite").path
        let repo = try SQLiteRepository(path: path)
        try await repo.migrate()
        try await Self.fill(repo.pool, megabytes: 12)
        // Only a checkpoint moves pages into the database file; the pool stays open throughout.
        var waited = 0
        while Self.size(path) < 10 << 20, waited < 200 {
            try await Task.sleep(for: .milliseconds(50))
            waited += 1
        }
        #expect(Self.size(path) >= 10 << 20, "the database file holds what was written")
        #expect(repo.checkpointer.completed > 0, "by the background checkpointer")
        #expect(try await repo.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM filler") } == 12 * 4 * 64)
    }

    /// Under writes that never pause the log grows (a PASSIVE checkpoint never catches up with a writer
    /// appending all the time) up to the fallback's bound; when the writer pauses, as between a server's
    /// requests, the checkpoint completes and the next write starts the log from its beginning again.
    @Test func theLogIsReusedWhenTheWriterPauses() async throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("db.sqlite").path
        let repo = try SQLiteRepository(path: path)
        try await repo.migrate()
        try await Self.fill(repo.pool, megabytes: 24) {
            for _ in 0..<500 where repo.checkpointer.busy { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(Self.size(path) >= 20 << 20)
        #expect(Self.size(path + "-wal") < 8 << 20, "the log was reused, not grown by everything written")
    }

    @Test func aCheckpointerThatIsNeverAskedStillBoundsTheLog() async throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("db.sqlite").path
        // The fallback's threshold reached first: the committing connection checkpoints, nothing is requested.
        let checkpointer = WALCheckpointer(path: path, pages: 500, blockingPages: 500)
        var config = Configuration()
        config.prepareDatabase { db in checkpointer.install(on: db) }
        let pool = try DatabasePool(path: path, configuration: config)
        try await Self.fill(pool, megabytes: 8)
        #expect(checkpointer.completed == 0)
        #expect(Self.size(path) >= 7 << 20, "the fallback copied the log into the file")
        #expect(Self.size(path + "-wal") < 4 << 20, "the log never grew much past 500 pages")
    }

    @Test func underSustainedWritesTheLogStaysNearItsBound() async throws {
        let dir = try Self.folder()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("db.sqlite").path
        // Background checkpoints asked for every 100 pages, the committing connection's own past 1,000.
        let checkpointer = WALCheckpointer(path: path, pages: 100, blockingPages: 1_000)
        var config = Configuration()
        config.busyMode = .timeout(5)
        config.prepareDatabase { db in checkpointer.install(on: db) }
        let pool = try DatabasePool(path: path, configuration: config)
        try await Self.fill(pool, megabytes: 24)
        #expect(Self.size(path) >= 20 << 20)
        // 1,000 pages of 4 KiB, plus the transaction that crossed the mark and the frames' headers.
        #expect(Self.size(path + "-wal") < 6 << 20, "the log's file grew to \(Self.size(path + "-wal")) bytes")
    }
}
