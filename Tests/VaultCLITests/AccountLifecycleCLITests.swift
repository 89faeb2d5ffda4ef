import Foundation
import GRDB
import Testing
import VaultAPI
import VaultCrypto

@testable import VaultClient

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The account lifecycle through the built tools on both backends (Docs/design.md §2): password change,
/// recovery, sessions, suspension and deletion, each checked where a user would see it and in the database.
@Suite("Account lifecycle (CLI, both backends)", .serialized)
struct AccountLifecycleCLITests {
    static let newPassword = "a brand new long password"

    /// Runs one scalar count against the world's server database.
    static func count(_ world: FaultWorld, _ sql: String) async throws -> Int {
        let db = world.server.database
        if let path = db.sqlitePath {
            var config = Configuration()
            config.readonly = true
            config.busyMode = .timeout(5)
            let queue = try DatabaseQueue(path: path, configuration: config)
            defer { try? queue.close() }
            return try await queue.read { try Int.fetchOne($0, sql: sql) ?? -1 }
        }
        return Int(try await ServerDatabase.psql(db.url, sql).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    static func json(_ text: String) throws -> Any { try JSONSerialization.jsonObject(with: Data(text.utf8)) }

    @Test(arguments: FaultBackend.allCases)
    func passwordChangeEndsOtherSessionsAndOnlyTheNewPasswordWorks(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            // A second device that knows the account (its profile holds the old salt) and a session.
            #expect(try await world.patient(["login", "--username", "alice"], home: "phone").status == 0)
            let sessions = try Self.json(try await world.patient(["sessions", "--json"]).stdout) as? [[String: Any]]
            #expect(sessions?.count == 2)
            #expect(sessions?.filter { $0["current"] as? Bool == true }.count == 1)

            let change = try await world.tools.run(
                "carevault-patient",
                ["password", "change"],
                home: "alice",
                password: FaultWorld.password,
                extra: world.common.merging(["CAREVAULT_NEW_PASSWORD": Self.newPassword]) { _, b in b }
            )
            #expect(change.status == 0, "\(change.stderr)")

            // Anyone may ask for the login parameters: they now carry the change's signed parameters, never
            // its login verifier or key bundle (either would let anyone guess the new password offline).
            var ask = URLRequest(url: try #require(URL(string: world.server.url + Routes.loginParameters)))
            ask.httpMethod = "POST"
            ask.setValue("application/json", forHTTPHeaderField: "Content-Type")
            ask.setValue(CareVaultVersion.release, forHTTPHeaderField: CareVaultVersion.clientHeader)
            ask.httpBody = Data(#"{"username":"alice"}"#.utf8)
            let (body, _) = try await URLSession.shared.data(for: ask)
            let offered = try #require(try Self.json(String(decoding: body, as: UTF8.self)) as? [String: Any])
            #expect(offered["credentialParameters"] is [String: Any], "the signed parameters are offered")
            #expect(offered["credentialUpdate"] == nil)
            for secret in ["loginVerifier", "keyBundle", "ciphertext"] {
                #expect(!String(decoding: body, as: UTF8.self).contains(secret), "\(secret) is not served before a login")
            }

            // The other session ended at once; the old password opens nothing on the server any more.
            #expect(try await world.patient(["sync"], home: "phone").status == 77)
            let old = try await world.patient(["login", "--username", "alice"], home: "phone")
            #expect(old.status == 77, "\(old.stderr)")
            func withNew(_ args: [String], home: String) async throws -> Tools.Result {
                try await world.tools.run("carevault-patient", args, home: home, password: Self.newPassword, extra: world.common)
            }
            // The device that stored the old salt accepts the signed change; a fresh device too; both read the data.
            for home in ["phone", "laptop"] {
                let login = try await withNew(["login", "--username", "alice"], home: home)
                #expect(login.status == 0, "\(home): \(login.stderr)")
                #expect(try await withNew(["activity", "list", "--json"], home: home).stdout.contains("walk"), "\(home)")
            }
            // A wrong current password changes nothing.
            let wrong = try await world.tools.run(
                "carevault-patient",
                ["password", "change"],
                home: "laptop",
                password: "not the password at all",
                extra: world.common.merging(["CAREVAULT_NEW_PASSWORD": "yet another password"]) { _, b in b }
            )
            #expect(wrong.status == 77, "\(wrong.stderr)")
            #expect(try await withNew(["login", "--username", "alice"], home: "tablet").status == 0)

            // A revoked session is refused at once.
            let laptop = try Self.json(try await withNew(["sessions", "--json"], home: "laptop").stdout) as? [[String: Any]]
            let laptopID = try #require(laptop?.first { $0["current"] as? Bool == true }?["id"] as? String)
            #expect(laptop?.first { $0["current"] as? Bool == true }?["lastUsedAt"] is NSNumber, "the listing itself is a use")
            let revoke = try await world.patient(["sessions", "revoke", laptopID])
            #expect(revoke.status == 0, "\(revoke.stderr)")
            #expect(try await withNew(["sync"], home: "laptop").status == 77)
            #expect(try await withNew(["sync"], home: "tablet").status == 0, "other sessions stay")
        }
    }

    @Test(arguments: FaultBackend.allCases)
    func recoveryKeySetsANewPasswordAndIsNeverWrittenToDisk(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            let pw = "carol's first password"
            let reg = try await world.tools.run(
                "carevault-patient",
                ["register", "--username", "carol", "--json"],
                home: "carol",
                password: pw,
                extra: world.common
            )
            #expect(reg.status == 0, "\(reg.stderr)")
            let key = try #require((try Self.json(reg.stdout) as? [String: Any])?["recoveryKey"] as? String)
            #expect(try await world.tools.run("carevault-admin", ["approve", "--all"], extra: world.common).status == 0)
            #expect(
                try await world.tools.run("carevault-patient", ["login", "--username", "carol"], home: "carol", password: pw, extra: world.common)
                    .status
                    == 0
            )

            func recover(_ user: String, key: String) async throws -> Tools.Result {
                try await world.tools.run(
                    "carevault-patient",
                    ["account", "recover", "--username", user],
                    home: "carol",
                    extra: world.common.merging(["CAREVAULT_RECOVERY_KEY": key, "CAREVAULT_NEW_PASSWORD": Self.newPassword]) { _, b in b }
                )
            }
            // A wrong key and an unknown user get the same refusal.
            let wrongKey = RecoveryKey.generate().text
            let wrong = try await recover("carol", key: wrongKey)
            let unknown = try await recover("nobody", key: wrongKey)
            #expect(wrong.status == 77 && unknown.status == 77)
            #expect(wrong.stderr == unknown.stderr, "\(wrong.stderr) vs \(unknown.stderr)")
            #expect(try await recover("carol", key: "not a key").status == 64)

            let ok = try await recover("carol", key: key)
            #expect(ok.status == 0, "\(ok.stderr)")
            #expect(
                try await world.tools.run("carevault-patient", ["login", "--username", "carol"], home: "c2", password: pw, extra: world.common).status
                    == 77
            )
            #expect(
                try await world.tools.run(
                    "carevault-patient",
                    ["login", "--username", "carol"],
                    home: "c2",
                    password: Self.newPassword,
                    extra: world.common
                )
                .status == 0
            )

            // Neither the key's text nor its bytes are in any file but the test's own capture of stdout.
            let bytes = try RecoveryKey(text: key).key.copyBytes()
            let needles = [Data(key.utf8), Data(key.replacingOccurrences(of: "-", with: "").utf8), Data(bytes), Data(Base64URL.encode(bytes).utf8)]
            let files = FileManager.default.enumerator(at: world.tools.root, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
            var scanned = 0
            for file in files where !file.lastPathComponent.hasPrefix("out-") && !file.lastPathComponent.hasPrefix("err-") {
                guard let data = try? Data(contentsOf: file) else { continue }
                scanned += 1
                for n in needles { #expect(data.range(of: n) == nil, "recovery key found in \(file.path)") }
            }
            #expect(scanned > 5)
        }
    }

    @Test(arguments: FaultBackend.allCases)
    func suspensionBlocksLoginAndReadsAndDeletionRemovesEveryRow(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            let id = try #require(
                (try Self.json(try await world.patient(["whoami", "--json"]).stdout) as? [String: String])?["userID"]?.lowercased()
            )
            #expect(try await world.patient(["activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions"]).status == 0)
            let doctor = { (args: [String]) in
                try await world.tools.run("carevault-doctor", args, home: "bob", password: "drbob's password!", extra: world.common)
            }
            #expect(try await doctor(["register", "--username", "drbob"]).status == 0)
            #expect(try await world.tools.run("carevault-admin", ["approve", "--all"], extra: world.common).status == 0)
            #expect(try await doctor(["login", "--username", "drbob"]).status == 0)
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.tools.run("carevault-admin", ["approve", "--all"], extra: world.common).status == 0)
            #expect(try await doctor(["patients", "--json"]).stdout.contains("alice"))

            let admin = { (args: [String]) in try await world.tools.run("carevault-admin", args, extra: world.common) }
            let suspend = try await admin(["suspend", "alice", "--reason", "lost phone"])
            #expect(suspend.status == 0, "\(suspend.stderr)")
            #expect(try await world.patient(["sync"]).status == 77, "its session ended")
            let login = try await world.patient(["login", "--username", "alice"], home: "other")
            #expect(login.status == 77 && login.stderr.contains("suspended"), "\(login.stderr)")
            let kept = "SELECT count(*) FROM versions WHERE owner_id = '\(id)'"
            #expect(try await Self.count(world, kept) > 0, "its data stays")
            #expect(try await admin(["reinstate", "alice"]).status == 0)
            #expect(try await world.patient(["login", "--username", "alice", "--remember"]).status == 0)
            #expect(try await world.patient(["activity", "list", "--json"]).stdout.contains("walk"))

            // The patient's own export: every category, JSON or the doctor's FHIR R4 Bundle.
            let fhir = try await world.patient(["export", "--format", "fhir"])
            #expect(fhir.status == 0 && fhir.stdout.contains("\"Bundle\"") && fhir.stdout.contains("Walk"), "\(fhir.stderr)")
            #expect(try await world.patient(["export", "--format", "json"]).stdout.contains("\"walk\""))

            // Deletion needs the password (a session and the remembered key are not enough) and a confirmation;
            // with both it removes every row of alice's and the doctor's share.
            let guessed = try await world.tools.run(
                "carevault-patient",
                ["account", "delete", "--yes"],
                home: "alice",
                password: "not alice's password",
                extra: world.common
            )
            #expect(guessed.status == 77, "\(guessed.stderr)")
            #expect(try await Self.count(world, kept) > 0, "nothing was deleted")
            #expect(try await world.patient(["account", "delete"]).status == 64)
            let delete = try await world.patient(["account", "delete", "--yes"])
            #expect(delete.status == 0, "\(delete.stderr)")
            for (table, column) in [
                ("versions", "owner_id"), ("heads", "owner_id"), ("tresors", "owner_id"), ("shares", "patient_id"), ("sessions", "user_id"),
                ("users", "id"), ("owner_sequences", "owner_id"), ("account_deletions", "owner_id"), ("tresor_commitments", "owner_id"),
            ] {
                #expect(try await Self.count(world, "SELECT count(*) FROM \(table) WHERE \(column) = '\(id)'") == 0, "\(table)")
            }
            #expect(try await Self.count(world, "SELECT count(*) FROM audit_log WHERE action = 'account.deleted'") == 1)
            #expect(try await !doctor(["patients", "--json"]).stdout.contains("alice"), "the share is gone")
            let folder = Profile.folder(home: world.tools.root.appendingPathComponent("alice"), server: world.server.url, username: "alice")
            #expect(!FileManager.default.fileExists(atPath: folder.path), "no local copy is left")
            #expect(try await world.patient(["whoami"]).status != 0)
        }
    }

    /// `account recovery rotate` in both tools: a new key printed once (and written nowhere), the old one
    /// refused from then on, the new one sets a new password; a wrong password rotates nothing.
    @Test(arguments: FaultBackend.allCases)
    func recoveryRotatePrintsANewKeyOnceAndTheOldOneStopsWorking(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            for (tool, user, password) in [
                ("carevault-patient", "dora", "dora's first password"), ("carevault-doctor", "drzoe", "drzoe's password!"),
            ] {
                func run(_ args: [String], password: String = password, extra: [String: String] = [:]) async throws -> Tools.Result {
                    try await world.tools.run(tool, args, home: user, password: password, extra: world.common.merging(extra) { _, b in b })
                }
                let reg = try await run(["register", "--username", user, "--json"])
                #expect(reg.status == 0, "\(reg.stderr)")
                let first = try #require((try Self.json(reg.stdout) as? [String: Any])?["recoveryKey"] as? String)
                #expect(try await world.tools.run("carevault-admin", ["approve", "--all"], extra: world.common).status == 0)
                #expect(try await run(["login", "--username", user]).status == 0)

                let current = ["CAREVAULT_RECOVERY_KEY": first]
                #expect(try await run(["account", "recovery", "rotate"], password: "a wrong password", extra: current).status == 77, "\(tool)")
                // The password alone does not replace the recovery key: the current one is needed too.
                let passwordOnly = try await run(["account", "recovery", "rotate", "--no-current-key"])
                #expect(passwordOnly.status == 64 && passwordOnly.stderr.contains("currentRecoveryLoginKey is required"), "\(passwordOnly.stderr)")
                let rotate = try await run(["account", "recovery", "rotate", "--json"], extra: current)
                #expect(rotate.status == 0, "\(tool): \(rotate.stderr)")
                let second = try #require((try Self.json(rotate.stdout) as? [String: Any])?["recoveryKey"] as? String)
                #expect(second != first)
                let bytes = try RecoveryKey(text: second).key.copyBytes()
                let files = FileManager.default.enumerator(at: world.tools.root, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
                for file in files where !file.lastPathComponent.hasPrefix("out-") && !file.lastPathComponent.hasPrefix("err-") {
                    guard let data = try? Data(contentsOf: file) else { continue }
                    for n in [Data(second.utf8), Data(bytes), Data(Base64URL.encode(bytes).utf8)] {
                        #expect(data.range(of: n) == nil, "the new recovery key is in \(file.path)")
                    }
                }

                func recover(_ key: String) async throws -> Tools.Result {
                    try await run(
                        ["account", "recover", "--username", user],
                        extra: ["CAREVAULT_RECOVERY_KEY": key, "CAREVAULT_NEW_PASSWORD": Self.newPassword]
                    )
                }
                #expect(try await recover(first).status == 77, "\(tool): the old key stopped working")
                let recovered = try await recover(second)
                #expect(recovered.status == 0, "\(tool): \(recovered.stderr)")
                #expect(try await run(["login", "--username", user], password: Self.newPassword).status == 0)
            }
            #expect(try await Self.count(world, "SELECT count(*) FROM audit_log WHERE action = 'account.recovery-key-replaced'") == 2)
        }
    }
}
