import Foundation
import GRDB
import Testing
import VaultTestSupport

/// `carevault-admin audit checkpoint|verify` and `carevault-patient access-log` as a user runs them
/// (Docs/design.md §6, §7): the signed checkpoint is reported, and a log edited in the server's database
/// ends both tools with exit status 65 and the entry named.
@Suite("CLI: the audit log against signed checkpoints")
struct AuditCLITests {
    @Test func checkpointThenTamperingEndsBothToolsWith65() async throws {
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
        let common = ["CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.path + "/admin.key"]
        func patient(_ args: [String]) async throws -> Tools.Result {
            try await t.run("carevault-patient", args, home: "alice", password: "alice's long password", extra: common)
        }
        func admin(_ args: [String]) async throws -> Tools.Result { try await t.run("carevault-admin", args, extra: common) }

        #expect(try await patient(["register", "--username", "alice"]).status == 0)
        #expect(try await admin(["approve", "--all"]).status == 0)
        #expect(try await patient(["login", "--username", "alice", "--remember"]).status == 0)
        let unsigned = try await patient(["access-log"])
        #expect(unsigned.status == 0 && unsigned.stdout.contains("not verified: the admin has not signed an audit checkpoint yet"))

        let signed = try await admin(["audit", "checkpoint"])
        #expect(signed.status == 0 && signed.stdout.hasPrefix("signed checkpoint "), "\(signed.stderr)")
        #expect(FileManager.default.fileExists(atPath: adminDir.appendingPathComponent("audit-checkpoint.json").path))
        let verified = try await admin(["audit", "verify"])
        #expect(verified.status == 0 && verified.stdout.contains("verified against checkpoint"), "\(verified.stdout)")
        let log = try await patient(["access-log"])
        #expect(log.status == 0 && log.stdout.contains("verified against checkpoint"), "\(log.stderr)")
        #expect(log.stdout.contains("account.registered") && log.stdout.contains("verified"))

        // Someone with the database file edits the patient's registration entry in place.
        let queue = try DatabaseQueue(path: db.path)
        let op = ServerOperator.sqliteFile(db.path)
        let edited = try await queue.read { db in try UInt64.fetchOne(db, sql: "SELECT sequence FROM audit_log WHERE action = 'account.registered'")!
        }
        try await op.dropGuard(of: .auditLog)
        try await op.shiftAuditTime(sequence: edited, by: 1)
        let broken = try await admin(["audit", "verify"])
        #expect(broken.status == 65, "\(broken.stderr)")
        #expect(broken.stderr.contains("audit log broken at entry \(edited) (edited entry)"), "\(broken.stderr)")
        let refused = try await patient(["access-log"])
        #expect(refused.status == 65 && refused.stderr.contains("edited entry"), "\(refused.stderr)")
        #expect(try await admin(["audit", "checkpoint"]).status == 65, "nothing is signed over a broken log")

        // The entry put back, then no longer tagged with the patient, every hash left as stored: the patient's
        // own links still name it (Docs/envelope-v1.md §3.1).
        try await op.shiftAuditTime(sequence: edited, by: -1)
        try await op.rewriteAuditEntry(sequence: edited, untagged: true)
        let untagged = try await patient(["access-log"])
        #expect(untagged.status == 65 && untagged.stderr.contains("missing entry"), "\(untagged.stderr)")
        #expect(!untagged.stdout.contains("account.registered"))
    }
}
