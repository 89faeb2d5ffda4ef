import Foundation
import Testing
import VaultTestSupport

@testable import VaultServer

/// The transaction every multi-statement flow runs in (`SQLStore.transaction`): the same rules on both
/// engines, and on SQLite a flow driven to its end inside one GRDB write (`Database.run`).
@Suite("Repository: a flow's transaction, on both engines")
struct SQLTransactionTests {
    struct Refused: Error {}

    @Test(arguments: Backend.allCases)
    func aFlowCommitsWhollyOrNotAtAll(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            if let sqlite = repo as? SQLiteRepository { try await Self.exercise(sqlite) }
            if let pg = repo as? PostgresRepository { try await Self.exercise(pg) }
        }
    }

    static func exercise(_ store: some SQLStore) async throws {
        let keys: SQLStatement = "SELECT key AS value FROM meta WHERE key LIKE 'flow-%' ORDER BY key"
        // A flow that throws after writing leaves nothing behind.
        await #expect(throws: Refused.self) {
            try await store.transaction(conflict: nil) { sql in
                try await sql.execute("INSERT INTO meta (key, value) VALUES ('flow-refused', \([UInt8]([1])))")
                throw Refused()
            }
        }
        #expect(try await store.rows(StoredText.self, keys).isEmpty)
        // A unique constraint broken inside is the conflict the caller names.
        await #expect(throws: RepositoryError.conflict("taken")) {
            try await store.transaction(conflict: "taken") { sql in
                try await sql.execute("INSERT INTO meta (key, value) VALUES ('server_secret', \([UInt8]([1])))")
            }
        }
        // A flow that really suspends between its statements still runs them all, in one transaction.
        let seen = try await store.transaction(conflict: nil) { sql in
            try await sql.execute("INSERT INTO meta (key, value) VALUES ('flow-a', \([UInt8]([1])))")
            try await Task.sleep(for: .milliseconds(5))
            await Task.yield()
            try await sql.execute("INSERT INTO meta (key, value) VALUES ('flow-b', \([UInt8]([2])))")
            return try await sql.rows(StoredText.self, keys).map(\.value)
        }
        #expect(seen == ["flow-a", "flow-b"])
        #expect(try await store.rows(StoredText.self, keys).map(\.value) == ["flow-a", "flow-b"])
    }
}
