import Foundation
import GRDB
import Testing
import VaultTestSupport

/// `account move --to URL` through the built tools (Docs/operations.md §3, "Moving the service to a new
/// address"): a profile follows the service to another address of the same deployment with everything the
/// device accepted, and nothing moves to another deployment or over an existing profile.
@Suite("End to end: moving a profile to a new address of the same deployment", .serialized)
struct AccountMoveCLITests {
    static let patientPassword = "alice's long password"
    static let doctorPassword = "bob's long password"

    /// One deployment's server process over a database of its own (a SQLite file under `root/name`), or nil
    /// when `backend` is not configured. When it does not start, its database is dropped.
    static func start(_ t: Tools, _ name: String, adminPub: URL, backend: FaultBackend = .sqlite) async throws -> ServerProcess? {
        let root = t.root.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        guard let database = try await ServerDatabase.make(backend, in: root) else { return nil }
        let server = ServerProcess(adminPub: adminPub, database: database, log: root.appendingPathComponent("server.out"))
        do {
            try await server.start()
        } catch {
            await server.stop()
            await database.drop()
            throw error
        }
        return server
    }

    /// The same server under another name: `localhost` for `127.0.0.1`.
    static func otherName(_ url: String) -> String { url.replacingOccurrences(of: "127.0.0.1", with: "localhost") }

    /// The folder name of a server's profiles under a home (Docs/envelope-v1.md §2.5).
    static func profiles(_ t: Tools, home: String, server: String) -> URL {
        let key = server.replacingOccurrences(of: "://", with: "_").map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" ? $0 : "_" }
        return t.root.appendingPathComponent(home).appendingPathComponent("profiles").appendingPathComponent(String(key))
    }

    /// Every file under a home with its bytes.
    static func files(_ t: Tools, home: String) throws -> [String: Data] {
        let root = t.root.appendingPathComponent(home)
        var out: [String: Data] = [:]
        guard let all = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil) else { return out }
        for case let url as URL in all where (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
            out[String(url.path.dropFirst(root.path.count))] = try Data(contentsOf: url)
        }
        return out
    }

    /// The rows of `table` in the store of a profile folder, in a stable order.
    static func rows(_ folder: URL, _ table: String) throws -> [Row] {
        let queue = try DatabaseQueue(path: folder.appendingPathComponent("store.sqlite").path)
        defer { try? queue.close() }
        return try queue.read { try Row.fetchAll($0, sql: "SELECT * FROM \(table) ORDER BY 1, 2") }
    }

    /// The servers `current.json` of a home names.
    static func current(_ t: Tools, home: String) throws -> [String: String] {
        let data = try Data(contentsOf: t.root.appendingPathComponent(home).appendingPathComponent("current.json"))
        return try JSONDecoder().decode([String: String].self, from: data)
    }

    /// Replaces the token of a profile's stored session, keeping the file's mode.
    static func setSessionToken(_ folder: URL, _ token: String) throws {
        let url = folder.appendingPathComponent("session.json")
        var session = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
        session["token"] = token
        try JSONSerialization.data(withJSONObject: session).write(to: url)
    }

    static func sessionToken(_ folder: URL) throws -> String {
        let url = folder.appendingPathComponent("session.json")
        let session = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any]
        return try #require(session?["token"] as? String)
    }

    @Test(arguments: FaultBackend.allCases)
    func aPatientAndADoctorMoveToAnotherNameOfTheSameServerWithEverythingTheyAccepted(backend: FaultBackend) async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let adminDir = t.root.appendingPathComponent("admin")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
        guard let server = try await Self.start(t, "deployment", adminPub: adminDir.appendingPathComponent("admin.pub"), backend: backend) else {
            return
        }
        // Stopped, then its database dropped, whether the test returns or throws (awaited, so not in a `defer`).
        try await withCleanup {
            try await Self.moveToAnotherName(t, server, adminDir: adminDir)
        } cleanup: {
            await server.stop()
            await server.database.drop()
        }
    }

    /// The body of the test above, on its running `server`.
    static func moveToAnotherName(_ t: Tools, _ server: ServerProcess, adminDir: URL) async throws {
        let (old, new) = (server.url, Self.otherName(server.url))
        let common = [
            "CAREVAULT_ADMIN_KEY": adminDir.appendingPathComponent("admin.pub").path,
            "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path,
        ]
        func patient(_ args: [String], at url: String? = nil, password: String? = Self.patientPassword) async throws -> Tools.Result {
            try await t.run(
                "carevault-patient",
                args,
                home: "alice",
                password: password,
                extra: common.merging(["CAREVAULT_SERVER": url ?? old]) { _, b in b }
            )
        }
        func doctor(_ args: [String], at url: String? = nil, password: String? = Self.doctorPassword) async throws -> Tools.Result {
            try await t.run(
                "carevault-doctor",
                args,
                home: "bob",
                password: password,
                extra: common.merging(["CAREVAULT_SERVER": url ?? old]) { _, b in b }
            )
        }
        let approve = { try await t.run("carevault-admin", ["approve", "--all"], extra: common.merging(["CAREVAULT_SERVER": old]) { _, b in b }) }
        #expect(try await patient(["register", "--username", "alice"]).status == 0)
        #expect(try await doctor(["register", "--username", "drbob"]).status == 0)
        #expect(try await approve().status == 0)
        #expect(try await patient(["login", "--username", "alice", "--remember"]).status == 0)
        #expect(try await doctor(["login", "--username", "drbob", "--remember"]).status == 0)
        let add = try await patient([
            "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
        ])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(try await patient(["outcome", "record", "--activity", "walk", "--date", "today", "--value", "yes"]).status == 0)
        #expect(try await patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
        #expect(try await approve().status == 0)
        #expect(try await patient(["sync"]).status == 0)
        #expect(try await doctor(["show", "alice"]).status == 0)
        // The server's commitments as they are now, to roll back to later; then a newer state both devices accept.
        let op = ServerOperator.of(server.database)
        try await op.snapshotCommitments()
        #expect(try await patient(["activity", "add", "--id", "yoga", "--title", "Yoga", "--category", "interventions"]).status == 0)
        let seen = try await doctor(["show", "alice"])
        #expect(seen.status == 0 && seen.stdout.contains("Yoga"), "\(seen.stderr)")

        let (patientOld, doctorOld) = (Self.profiles(t, home: "alice", server: old), Self.profiles(t, home: "bob", server: old))
        let accepted = try Self.rows(patientOld.appendingPathComponent("alice"), "server_state")
        let cached = try Self.rows(doctorOld.appendingPathComponent("drbob"), "share_state")
        let cursors = try Self.rows(doctorOld.appendingPathComponent("drbob"), "cursors")
        #expect(!accepted.isEmpty && !cached.isEmpty && !cursors.isEmpty)
        // The doctor's session is one the server does not know: the move must log in at the new address.
        try Self.setSessionToken(doctorOld.appendingPathComponent("drbob"), String(repeating: "A", count: 43))

        // The patient's session shows the new address serves the account: no password at all.
        let moved = try await patient(["account", "move", "--to", new], password: nil)
        #expect(moved.status == 0, "\(moved.stderr)")
        #expect(
            moved.stdout.contains("moved alice from \(old) to \(new): it gave \(old)'s deployment id")
                && moved.stdout.contains("accepted this device's session") && moved.stdout.contains("not an impostor passing requests on"),
            "\(moved.stdout)"
        )
        #expect(moved.stdout.split(separator: "\n").count == 1)
        let movedDoctor = try await doctor(["account", "move", "--to", new, "--json"])
        #expect(movedDoctor.status == 0, "\(movedDoctor.stderr)")
        let answer = try JSONSerialization.jsonObject(with: Data(movedDoctor.stdout.utf8)) as? [String: String]
        #expect(answer?["status"] == "moved" && answer?["from"] == old && answer?["to"] == new, "\(movedDoctor.stdout)")
        #expect(answer?["checkedBy"] == "login" && answer?["rememberedKey"] == "resealed", "\(movedDoctor.stdout)")
        #expect(answer?["deployment"] == "same", "\(movedDoctor.stdout)")

        // The old address has no profile left; the new one has the same store.
        for (home, folder) in [("alice", patientOld), ("bob", doctorOld)] {
            #expect(!FileManager.default.fileExists(atPath: folder.path), "\(home): \(folder.path)")
            #expect(try Self.current(t, home: home) == [new: home == "alice" ? "alice" : "drbob"])
        }
        let gone = try await patient(["whoami"], password: nil)
        #expect(gone.status == 1 && gone.stderr.contains("not logged in"), "\(gone.stderr)")
        let (patientNew, doctorNew) = (
            Self.profiles(t, home: "alice", server: new).appendingPathComponent("alice"),
            Self.profiles(t, home: "bob", server: new).appendingPathComponent("drbob")
        )
        #expect(try Self.rows(patientNew, "server_state") == accepted)
        #expect(try Self.rows(doctorNew, "share_state") == cached)
        #expect(try Self.rows(doctorNew, "cursors") == cursors)
        let whoami = try JSONSerialization.jsonObject(with: Data(try await patient(["whoami", "--json"], at: new, password: nil).stdout.utf8))
        #expect((whoami as? [String: String])?["server"] == new)

        // No login at the new address: the remembered keys open, the cursors are kept.
        let sync = try await patient(["sync"], at: new, password: nil)
        #expect(sync.status == 0 && sync.stdout.contains("received 0"), "\(sync.stdout) \(sync.stderr)")
        let show = try await doctor(["show", "alice"], at: new, password: nil)
        #expect(show.status == 0 && show.stdout.contains("Yoga"), "\(show.stderr)")
        let patients = try await doctor(["patients"], at: new, password: nil)
        #expect(patients.status == 0 && patients.stdout.contains("alice"), "\(patients.stderr)")

        // The server goes back to the older commitments: what the devices accepted before the move catches it.
        try await op.restoreCommitments()
        let rolledBack = try await doctor(["show", "alice"], at: new, password: nil)
        #expect(rolledBack.status == 0 && rolledBack.stderr.contains("the server is behind for interventions"), "\(rolledBack.stderr)")
        #expect(rolledBack.stdout.contains("Yoga"), "the view accepted before stands: \(rolledBack.stdout)")
        let adherence = try await doctor(["adherence", "alice"], at: new, password: nil)
        #expect(adherence.status == 0 && adherence.stderr.contains("the server is behind for interventions"), "\(adherence.stderr)")
        #expect(adherence.stderr.contains("what is shown is as of the patient's commitments"), "\(adherence.stderr)")
        let rolledBackJSON = try await doctor(["show", "alice", "--json"], at: new, password: nil)
        let object = try JSONSerialization.jsonObject(with: Data(rolledBackJSON.stdout.utf8)) as? [String: Any]
        #expect((object?["serverBehind"] as? [String])?.count == 1 && object?["complete"] as? Bool == true, "\(rolledBackJSON.stdout)")
        let behind = try await patient(["sync"], at: new, password: nil)
        #expect(behind.status == 0, "\(behind.stderr)")
        #expect(behind.stderr.contains("the server is behind what this device last saw (interventions"), "\(behind.stderr)")
    }

    @Test func anotherDeploymentOrAnExistingProfileMovesNothing() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let adminDir = t.root.appendingPathComponent("admin")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
        let pub = adminDir.appendingPathComponent("admin.pub")
        let a = try #require(try await Self.start(t, "a", adminPub: pub))
        defer { a.stopIfRunning() }
        // Another deployment under the same admin key, with an account of the same name and password.
        let b = try #require(try await Self.start(t, "b", adminPub: pub))
        defer { b.stopIfRunning() }
        let common = ["CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path]
        func patient(_ args: [String], at url: String, home: String = "alice", password: String? = Self.patientPassword) async throws -> Tools.Result
        {
            try await t.run("carevault-patient", args, home: home, password: password, extra: common.merging(["CAREVAULT_SERVER": url]) { _, b in b })
        }
        func approve(_ url: String, ledger: String) async throws -> Int32 {
            let env = common.merging(["CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_LEDGER": t.root.appendingPathComponent(ledger).path]) { _, b in b }
            return try await t.run("carevault-admin", ["approve", "--all"], extra: env).status
        }
        for (url, home, ledger) in [(a.url, "alice", "ledger-a.json"), (b.url, "alice-b", "ledger-b.json")] {
            #expect(try await patient(["register", "--username", "alice"], at: url, home: home).status == 0)
            #expect(try await approve(url, ledger: ledger) == 0)
            #expect(try await patient(["login", "--username", "alice", "--remember"], at: url, home: home).status == 0)
        }
        #expect(try await patient(["activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions"], at: a.url).status == 0)
        let before = try Self.files(t, home: "alice")
        let folder = Self.profiles(t, home: "alice", server: a.url).appendingPathComponent("alice")

        // No profile for --server: a usage error.
        let none = try await patient(["account", "move", "--to", b.url], at: "http://127.0.0.1:1")
        #expect(none.status == 64 && none.stderr.contains("no profile for http://127.0.0.1:1"), "\(none.stderr)")

        // B gives another deployment id: refused before the session or the password goes there.
        let other = try await patient(["account", "move", "--to", b.url], at: a.url)
        #expect(other.status == 65 && other.stderr.contains("\(b.url) is another deployment than \(a.url)"), "\(other.stderr)")
        #expect(other.stderr.contains("nothing was sent and nothing was moved"), "\(other.stderr)")
        #expect(try Self.files(t, home: "alice") == before)
        // Without a password: refused the same way, no password asked for.
        let noPassword = try await patient(["account", "move", "--to", b.url], at: a.url, password: nil)
        #expect(noPassword.status == 65 && noPassword.stderr.contains("another deployment"), "\(noPassword.stderr)")
        #expect(try Self.files(t, home: "alice") == before)

        // A session B takes (B's own alice's) changes nothing: B is refused before the session is sent.
        let session = try Data(contentsOf: folder.appendingPathComponent("session.json"))
        try Self.setSessionToken(folder, try Self.sessionToken(Self.profiles(t, home: "alice-b", server: b.url).appendingPathComponent("alice")))
        let forged = try await patient(["account", "move", "--to", b.url], at: a.url)
        #expect(forged.status == 65 && forged.stderr.contains("another deployment"), "\(forged.stderr)")
        #expect(!FileManager.default.fileExists(atPath: Self.profiles(t, home: "alice", server: b.url).path))
        try session.write(to: folder.appendingPathComponent("session.json"))
        #expect(try Self.files(t, home: "alice") == before)

        // A profile of alice for the new address already exists on this device: never merged or replaced.
        let sameServer = Self.otherName(a.url)
        #expect(try await patient(["login", "--username", "alice"], at: sameServer).status == 0)
        let both = try Self.files(t, home: "alice")
        let existing = try await patient(["account", "move", "--to", sameServer], at: a.url)
        #expect(existing.status == 64 && existing.stderr.contains("already has a profile of 'alice'"), "\(existing.stderr)")
        #expect(try Self.files(t, home: "alice") == both)
        #expect(try Self.current(t, home: "alice") == [a.url: "alice", sameServer: "alice"])

        // The old profile works as before.
        let sync = try await patient(["sync"], at: a.url, password: nil)
        #expect(sync.status == 0, "\(sync.stderr)")
    }
}
