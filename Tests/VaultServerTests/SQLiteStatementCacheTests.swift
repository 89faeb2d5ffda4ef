import Foundation
import GRDB
import GRDBSQLite
import Testing

@testable import VaultServer

/// The SQLite repository keeps its compiled statements per connection (`SQLiteRepository.all`, `one`):
/// that is only safe while their texts are a fixed set.
@Suite("SQLite: the statements kept per connection stay few")
struct SQLiteStatementCacheTests {
    /// A statement text per batch size would keep one statement per size ever pushed, for good.
    @Test func headLookupsOfEveryBatchSizeShareOneStatement() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("statements-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let repo = try SQLiteRepository(path: folder.appendingPathComponent("carevault.sqlite").path)
        try await repo.migrate()
        for n in 1...120 {
            // Ids a JSON array must escape, too: they are looked up, not spliced into the statement.
            let ids = (0..<n).map { String(format: "%032x", $0) } + ["quote\"d", "back\\slash", "x') OR 1=1 --"]
            #expect(try await repo.headTresors(ownerID: UUID(), recordIDs: ids).isEmpty)
        }
        let kept = try await repo.pool.read { db in
            var count = 0
            var statement = sqlite3_next_stmt(db.sqliteConnection, nil)
            while statement != nil {
                count += 1
                statement = sqlite3_next_stmt(db.sqliteConnection, statement)
            }
            return count
        }
        #expect(kept > 0 && kept < 20, "\(kept) statements kept on the connection that answered 120 lookups")
    }
}
