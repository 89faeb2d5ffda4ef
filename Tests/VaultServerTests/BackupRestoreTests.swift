import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

/// Docs/operations.md §5: SQLite's online backup (`sqlite3 .backup`) of a database a server is writing,
/// restored into a new file, serves the same accounts, records and audit chain.
@Suite("Backup and restore (SQLite online backup)")
struct BackupRestoreTests {
    static let sqlite3 = ["/usr/bin/sqlite3", "/usr/local/bin/sqlite3"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// SQLite's online backup of `source` into `destination`, as an operator runs it.
    static func onlineBackup(_ source: String, to destination: String) async throws -> Int32 {
        await ChildProcess.runDetached([try #require(sqlite3), source, ".backup '\(destination)'"])
    }

    @Test(.enabled(if: sqlite3 != nil, "needs the sqlite3 tool (Scripts/setup installs it)"), .timeLimit(.minutes(5)))
    func anOnlineBackupOfALiveDatabaseRestoresIntoAWorkingServer() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-backup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let live = dir.appendingPathComponent("live.sqlite").path
        let backup = dir.appendingPathComponent("backup.sqlite").path
        let restored = dir.appendingPathComponent("restored/carevault.sqlite").path
        let repo = try SQLiteRepository(path: live)
        try await repo.migrate()
        let harness = APIHarness(repository: repo)
        let app = Application(router: buildRouter(repository: repo, adminKey: harness.admin.publicKey, clock: harness.clock.function))
        let (alice, tresor, versionIDs) = try await app.test(.router) { client in
            let api = APIClient(client: client, harness: harness)
            let alice = try await api.user("alice", role: .patient)
            let tresor = Tresor.create(ownerID: alice.id, category: "interventions")
            #expect(try await api.declareTresor(alice, tresor).status == .ok)
            let envelopes = try (0..<20).map { try api.envelope(alice, tresor, record: "walk-\($0)", payload: "walked \($0) km") }
            #expect(try await api.push(alice, envelopes).0.status == .ok)
            // The server goes on registering accounts while the backup copies the database.
            async let writes: Int = {
                var accepted = 0
                for i in 0..<15 where try await api.register("late\(i)", role: .doctor).2.status == .accepted { accepted += 1 }
                return accepted
            }()
            #expect(try await Self.onlineBackup(live, to: backup) == 0)
            #expect(try await writes == 15)
            return (alice, tresor, Set(envelopes.map(\.versionID)))
        }

        // Restore into a new file (as an operator would: a copy of the backup where the server expects it).
        try FileManager.default.createDirectory(atPath: (restored as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: backup, toPath: restored)
        let restoredRepo = try SQLiteRepository(path: restored)
        try await restoredRepo.migrate()
        #expect(try await restoredRepo.verifyAudit().ok, "the audit chain of the snapshot is whole")
        let restoredApp = Application(router: buildRouter(repository: restoredRepo, adminKey: harness.admin.publicKey, clock: harness.clock.function))
        try await restoredApp.test(.router) { client in
            // Only the HTTP client is new: login and pull go through the restored server.
            let api = APIClient(client: client, harness: harness)
            let login = try await api.login("alice", password: alice.password)
            #expect(login.status == .ok, "the account and its verifier came back")
            let token = try api.decode(LoginResponse.self, login).token
            let pulled = try api.page(try await api.pull(token, owner: alice.id, tresor: tresor.id))
            #expect(Set(pulled.changes.map(\.envelope.versionID)) == versionIDs, "every pushed record came back")
            let opened = try pulled.changes.map {
                String(decoding: try $0.envelope.open(keys: tresor.keys, authorKey: alice.identity.signing.publicKey), as: UTF8.self)
            }
            #expect(opened.contains { $0.contains("walked 7 km") }, "and opens under the tresor key")
        }
    }
}
