import Foundation
import Testing
import VaultTestSupport

/// `carevault-patient access-log` resumes where the last check ended, and `--full` walks the whole chain
/// (Docs/design.md §6).
@Suite("CLI: the access log resumes, --full checks it all")
struct AccessLogResumeCLITests {
    @Test func aSecondRunResumesAndFullChecksTheWholeChain() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let adminDir = t.root.appendingPathComponent("admin")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
        let pub = adminDir.appendingPathComponent("admin.pub")
        let (server, url) = try await t.startServer(adminPub: pub, database: t.root.appendingPathComponent("server.sqlite"))
        defer { server.stopIfRunning() }
        let common = ["CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.path + "/admin.key"]
        func patient(_ args: [String]) async throws -> Tools.Result {
            try await t.run("carevault-patient", args, home: "alice", password: "alice's long password", extra: common)
        }
        #expect(try await patient(["register", "--username", "alice"]).status == 0)
        #expect(try await t.run("carevault-admin", ["approve", "--all"], extra: common).status == 0)
        #expect(try await patient(["login", "--username", "alice", "--remember"]).status == 0)

        let first = try await patient(["access-log"])
        #expect(first.status == 0 && !first.stdout.contains("resumed after entry"), "\(first.stderr)")
        #expect(try await t.run("carevault-admin", ["audit", "checkpoint"], extra: common).status == 0)
        let resumed = try await patient(["access-log"])
        #expect(resumed.status == 0 && resumed.stdout.contains("verified against checkpoint"), "\(resumed.stderr)")
        #expect(resumed.stdout.contains("resumed after entry") && resumed.stdout.contains("account.registered"), "\(resumed.stdout)")
        let full = try await patient(["access-log", "--full"])
        #expect(full.status == 0 && full.stdout.contains("verified against checkpoint"), "\(full.stderr)")
        #expect(!full.stdout.contains("resumed after entry") && full.stdout.contains("account.registered"), "\(full.stdout)")

        // The remembered link no longer what the chain holds there, the full check passing: a warning on
        // stderr, the entries and exit status 0 as for any passing check.
        let home = t.root.appendingPathComponent("alice")
        let files = FileManager.default.enumerator(at: home, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
        let file = try #require(files.first { $0.lastPathComponent == "access-log-resume.json" })
        var point = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
        point["hash"] = String(repeating: "0", count: 64)
        try JSONSerialization.data(withJSONObject: point).write(to: file)
        let warned = try await patient(["access-log"])
        #expect(warned.status == 0 && warned.stdout.contains("account.registered"), "\(warned.stderr)")
        #expect(warned.stderr.contains("warning: the log was rewritten or cut at or before entry"), "\(warned.stderr)")
        #expect(!warned.stdout.contains("rewritten"))
        let quiet = try await patient(["access-log"])
        #expect(quiet.status == 0 && !quiet.stderr.contains("rewritten"), "\(quiet.stderr)")
    }
}
