import Foundation
import GRDB
import Testing
import VaultTestSupport

/// What `carevault-doctor show` prints when the server's database was edited underneath (Docs/design.md
/// §5.1): "complete" only with a matching commitment of the patient's, and nothing that contradicts the
/// commitment on stdout unless asked for, marked.
@Suite("End to end: a doctor's view is complete only when the patient's commitment says so", .serialized)
struct CompletenessCLITests {
    @Test func showSaysNotConfirmedAndKeepsContradictedRecordsOffStdout() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let adminDir = t.root.appendingPathComponent("admin")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
        let pub = adminDir.appendingPathComponent("admin.pub")
        let db = t.root.appendingPathComponent("server.sqlite")
        let (server, url) = try await t.startServer(adminPub: pub, database: db)
        defer { server.stopIfRunning() }
        let common = [
            "CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path,
        ]
        func patient(_ args: [String]) async throws -> Tools.Result {
            try await t.run("carevault-patient", args, home: "alice", password: "alice's long password", extra: common)
        }
        func doctor(_ args: [String], home: String = "bob") async throws -> Tools.Result {
            try await t.run("carevault-doctor", args, home: home, password: "bob's long password", extra: common)
        }
        #expect(try await patient(["register", "--username", "alice"]).status == 0)
        #expect(try await doctor(["register", "--username", "drbob"]).status == 0)
        #expect(try await t.run("carevault-admin", ["approve", "--all"], extra: common).status == 0)
        #expect(try await patient(["login", "--username", "alice", "--remember"]).status == 0)
        #expect(try await doctor(["login", "--username", "drbob", "--remember"]).status == 0)
        for id in ["walk", "resurrected"] {
            let add = try await patient(["activity", "add", "--id", id, "--title", id, "--category", "interventions", "--schedule", "daily@08:00"])
            #expect(add.status == 0, "\(add.stderr)")
        }
        #expect(try await patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
        #expect(try await t.run("carevault-admin", ["approve", "--all"], extra: common).status == 0)
        #expect(try await patient(["sync"]).status == 0)
        // The live version of "resurrected", before the patient removes it.
        let queue = try DatabaseQueue(path: db.path)
        let live = try await queue.read { db in
            try Row.fetchAll(db, sql: "SELECT record_id, version_id FROM heads").map { ($0[0] as String, $0[1] as String) }
        }
        #expect(try await patient(["activity", "remove", "--id", "resurrected"]).status == 0)
        let honest = try await doctor(["show", "alice", "--json"])
        #expect(honest.status == 0, "\(honest.stderr)")
        let honestJSON = try JSONSerialization.jsonObject(with: Data(honest.stdout.utf8)) as? [String: Any]
        #expect(honestJSON?["complete"] as? Bool == true)

        // The operator brings the removed activity back (its older version), then, for a fresh doctor device,
        // also deletes the commitment and the head of "walk".
        let tombstones = try await queue.read { db in
            try Row.fetchAll(db, sql: "SELECT record_id, version_id FROM heads WHERE deleted").map { ($0[0] as String, $0[1] as String) }
        }
        let resurrect = try #require(live.first { r in tombstones.contains { $0.0 == r.0 } })
        let op = ServerOperator.sqliteFile(db.path)
        try await op.pointRecordHead(resurrect.0, at: resurrect.1, deleted: false)
        // A doctor device that has not cached this patient yet pulls the bent head and checks it.
        #expect(try await doctor(["login", "--username", "drbob", "--remember"], home: "bob-2").status == 0)
        let contradicted = try await doctor(["show", "alice"], home: "bob-2")
        #expect(contradicted.status == 65, "\(contradicted.stderr)")
        #expect(!contradicted.stdout.contains("resurrected") && !contradicted.stdout.contains("walk"), "nothing unverified on stdout")
        #expect(contradicted.stderr.contains("--show-unverified"))
        let marked = try await doctor(["show", "alice", "--show-unverified"], home: "bob-2")
        #expect(marked.status == 65)
        let rows = marked.stdout.split(separator: "\n").filter { $0.contains("resurrected") || $0.contains("walk") }
        #expect(!rows.isEmpty && rows.allSatisfy { $0.hasPrefix("UNVERIFIED") }, "\(marked.stdout)")
        let markedJSON = try await doctor(["show", "alice", "--json", "--show-unverified"], home: "bob-2")
        let object = try JSONSerialization.jsonObject(with: Data(markedJSON.stdout.utf8)) as? [String: Any]
        #expect((object?["activities"] as? [Any])?.isEmpty == true)
        #expect(((object?["unverified"] as? [String: Any])?["activities"] as? [Any])?.count == 2)
        #expect(object?["complete"] as? Bool == false)

        try await op.dropCommitments()
        try await op.dropRecordHead(try #require(live.first { $0.0 != resurrect.0 }).0)
        #expect(try await doctor(["login", "--username", "drbob", "--remember"], home: "bob-new").status == 0)
        let fresh = try await doctor(["show", "alice", "--json"], home: "bob-new")
        #expect(fresh.status == 0, "\(fresh.stderr)")
        let freshJSON = try JSONSerialization.jsonObject(with: Data(fresh.stdout.utf8)) as? [String: Any]
        #expect(freshJSON?["complete"] as? Bool == false, "no commitment: never complete")
        #expect(freshJSON?["notConfirmed"] as? [String] == ["interventions"])
        #expect((freshJSON?["asOf"] as? [String: Any])?.isEmpty == true)
        let text = try await doctor(["show", "alice"], home: "bob-new")
        #expect(text.stdout.contains("interventions: not confirmed"), "\(text.stdout)")
    }
}
