import Foundation
import GRDB
import Testing
import VaultTestSupport

/// A record damaged on the server, seen through the tools: the login on a new device is saved, the rest
/// of the records arrive, and the commands end with exit status 65 naming the record (Docs/design.md §5).
@Suite("End to end: a bad record is kept aside", .serialized)
struct QuarantineCLITests {
    @Test func aDamagedRecordEndsSyncWith65AndHealsWhenRestored() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let adminDir = t.root.appendingPathComponent("admin")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
        let pub = adminDir.appendingPathComponent("admin.pub")
        let db = t.root.appendingPathComponent("server.sqlite")
        let (server, url) = try await t.startServer(adminPub: pub, database: db)
        defer {
            server.stopIfRunning()
        }
        let common = [
            "CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path,
        ]
        func patient(_ args: [String], home: String = "first") async throws -> Tools.Result {
            try await t.run("carevault-patient", args, home: home, password: "alice's long password", extra: common)
        }
        #expect(try await patient(["register", "--username", "alice"]).status == 0)
        #expect(try await t.run("carevault-admin", ["approve", "--all"], extra: common).status == 0)
        #expect(try await patient(["login", "--username", "alice", "--remember"]).status == 0)
        for id in ["walk", "run"] {
            let add = try await patient(["activity", "add", "--id", id, "--title", id, "--category", "interventions", "--schedule", "daily@08:00"])
            #expect(add.status == 0, "\(add.stderr)")
        }

        // The envelope of the first record no longer parses.
        let queue = try DatabaseQueue(path: db.path)
        let op = ServerOperator.sqliteFile(db.path)
        let original = try await queue.read { db -> (String, Data) in
            let row = try Row.fetchOne(
                db,
                sql: "SELECT v.version_id, v.envelope FROM versions v JOIN heads h ON h.version_id = v.version_id LIMIT 1"
            )!
            return (row[0], row[1])
        }
        try await op.dropGuard(of: .versions)
        let broken = try StoredEnvelopeText.edit(original.1) { $0.replacingOccurrences(of: #""ciphertext":""#, with: #""ciphertext":"*"#) }
        try await op.replaceStoredEnvelope(of: original.0, with: [UInt8](broken))

        let login = try await patient(["login", "--username", "alice", "--remember"], home: "second")
        // The login succeeds (the account is fine) and warns about the record kept aside.
        #expect(login.status == 0, "\(login.stderr)")
        #expect(login.stdout.contains("logged in as alice"))
        #expect(login.stderr.contains("warning: 1 record from the server failed its integrity check and was not applied: malformed ×1"))
        #expect(!login.stderr.contains("unexpected answer"))
        let list = try await patient(["activity", "list", "--json"], home: "second")
        #expect(list.status == 0, "the login was saved: \(list.stderr)")
        #expect((try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [Any])?.count == 1, "the other record arrived")

        let sync = try await patient(["sync", "--verbose"], home: "second")
        #expect(sync.status == 65)
        #expect(sync.stderr.contains("kept aside: sequence"))
        #expect(sync.stderr.contains("malformed"))

        try await op.replaceStoredEnvelope(of: original.0, with: [UInt8](original.1))
        let healed = try await patient(["sync", "--verbose"], home: "second")
        #expect(healed.status == 0, "\(healed.stderr)")
        #expect(!healed.stderr.contains("kept aside"))
        let all = try await patient(["activity", "list", "--json"], home: "second")
        #expect((try JSONSerialization.jsonObject(with: Data(all.stdout.utf8)) as? [Any])?.count == 2)
    }
}
