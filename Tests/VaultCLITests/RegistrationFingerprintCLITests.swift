import Foundation
import Testing

/// The key fingerprint a person reads out at registration is the one the admin sees before approving, so
/// the two can be compared while the account is still pending (Docs/operations.md §7).
@Suite("End to end: the registration's key fingerprint, for the admin to compare")
struct RegistrationFingerprintCLITests {
    @Test func registrationShowsTheFingerprintTheAdminReviews() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let adminDir = t.root.appendingPathComponent("admin")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
        let pub = adminDir.appendingPathComponent("admin.pub")
        let (server, url) = try await t.startServer(adminPub: pub, database: t.root.appendingPathComponent("server.sqlite"))
        defer { server.stopIfRunning() }
        let common = [
            "CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path,
        ]
        let registered = try await t.run(
            "carevault-patient",
            ["register", "--username", "alice"],
            home: "alice",
            password: "alice's long password",
            extra: common
        )
        #expect(registered.status == 0, "\(registered.stderr)")
        let line = try #require(registered.stdout.split(separator: "\n").first { $0.hasPrefix("key fingerprint") }, "\(registered.stdout)")
        let fingerprint = try #require(line.split(separator: ": ").last.map(String.init))
        #expect(!fingerprint.isEmpty)
        let json = try await t.run(
            "carevault-patient",
            ["register", "--username", "bob", "--json"],
            home: "bob",
            password: "bob's long password",
            extra: common
        )
        let bob = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: String])
        let pending = try await t.run("carevault-admin", ["pending"], extra: common)
        #expect(pending.status == 0, "\(pending.stderr)")
        #expect(pending.stdout.contains(fingerprint), "the admin sees alice's: \(pending.stdout)")
        #expect(pending.stdout.contains(try #require(bob["fingerprint"])), "and bob's: \(pending.stdout)")
        #expect(bob["fingerprint"] != fingerprint)
    }
}
