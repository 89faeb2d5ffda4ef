import Foundation
import GRDB
import Testing
import VaultTestSupport

@testable import VaultCLI
@testable import VaultClient

/// The built tools, run as a user would: separate processes, a separate home folder per device, a real
/// server process on a free port. Checks output and the exit statuses of Docs/design.md §7.
struct Tools {
    static let bin: URL = {
        // Tests/VaultCLITests/CLITests.swift -> project root -> .build/debug
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug")
    }()

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    let root: URL
    var env: [String: String]

    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CAREVAULT_") }
    }

    /// Runs `tool` to its end and returns what it printed. It is waited for on a thread of its own: a test
    /// that blocks one of the pool's two threads for the length of a tool run stalls every in-process
    /// server and clock of the suites running beside it.
    @discardableResult
    func run(
        _ tool: String,
        _ args: [String],
        home: String? = nil,
        password: String? = nil,
        extra: [String: String] = [:]
    ) async throws
        -> Result
    {
        try await Self.offPool { try runBlocking(tool, args, home: home, password: password, extra: extra) }
    }

    private func runBlocking(_ tool: String, _ args: [String], home: String?, password: String?, extra: [String: String]) throws -> Result {
        let exe = Self.bin.appendingPathComponent(tool)
        guard FileManager.default.isExecutableFile(atPath: exe.path) else { throw ToolMissing(path: exe.path) }
        var e = env.merging(extra) { _, b in b }
        if let home { e["CAREVAULT_HOME"] = root.appendingPathComponent(home).path }
        if let password { e["CAREVAULT_PASSWORD"] = password }
        let out = root.appendingPathComponent("out-\(UUID().uuidString)")
        let err = root.appendingPathComponent("err-\(UUID().uuidString)")
        let status = try Spawn.run(exe.path, args, environment: e, stdout: out.path, stderr: err.path)
        return Result(
            status: status,
            stdout: try String(contentsOf: out, encoding: .utf8),
            stderr: try String(contentsOf: err, encoding: .utf8)
        )
    }

    /// `body` on a thread of its own, not on the test's pool (see `run`).
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Swift.Result { try body() }) }.start()
        }
    }

    struct ToolMissing: Error, CustomStringConvertible {
        var path: String
        var description: String { "\(path) is not built: run 'swift build' first (Scripts/test does)" }
    }

    /// Starts carevault-server on a free port over a SQLite file; returns the process and its URL.
    func startServer(adminPub: URL, database: URL) async throws -> (ChildProcess, String) {
        let p = ChildProcess()
        p.executableURL = Self.bin.appendingPathComponent("carevault-server")
        p.arguments = ["--admin-key", adminPub.path, "--port", "0", "--database", "sqlite:" + database.path]
        p.environment = env
        let out = root.appendingPathComponent("server.out")
        p.standardOutput = try ChildStdio.output(to: out)
        p.standardError = .null
        try p.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let text = try? String(contentsOf: out, encoding: .utf8),
                let r = text.range(of: "http://127.0.0.1:[0-9]+", options: .regularExpression)
            {
                return (p, String(text[r]))
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        p.signalIfRunning(SIGTERM)
        throw ToolMissing(path: "carevault-server did not start within 30 s")
    }
}

@Suite("End to end: the tools as separate processes", .serialized)
struct CLITests {
    /// Validates a FHIR Bundle with the fhir.resources models (Scripts/test installs them and sets
    /// CAREVAULT_FHIR_PYTHON); without them it says so and checks only the structure above.
    static func validateFHIR(_ json: String, in dir: URL) async throws {
        guard let python = ProcessInfo.processInfo.environment["CAREVAULT_FHIR_PYTHON"] else {
            print("note: FHIR validator unavailable (CAREVAULT_FHIR_PYTHON unset): the FHIR bundle was checked for structure only")
            return
        }
        let file = dir.appendingPathComponent("bundle.json")
        try Data(json.utf8).write(to: file)
        let p = ChildProcess()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = [
            "-c",
            "import sys; from fhir.resources.R4B.bundle import Bundle; b = Bundle.model_validate_json(open(sys.argv[1]).read()); "
                + "print(len(b.entry))", file.path,
        ]
        let err = dir.appendingPathComponent("validate.err")
        let out = dir.appendingPathComponent("validate.out")
        p.standardError = try ChildStdio.output(to: err)
        p.standardOutput = try ChildStdio.output(to: out)
        try p.run()
        try await p.exited()
        let problems = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        #expect(p.terminationStatus == 0, "the FHIR bundle does not validate: \(problems)")
        print(
            "FHIR bundle validated (fhir.resources R4B): \(((try? String(contentsOf: out, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)) entries"
        )
    }

    @Test func badArgumentsExit64AndServerDownExits69() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let missing = try await t.run("carevault-patient", ["activity", "add", "--title", "x"], home: "p")
        #expect(missing.status == 64)
        #expect(missing.stderr.hasPrefix("carevault-patient: error:"))
        #expect(try await t.run("carevault-doctor", ["export", "alice", "--format", "xml"], home: "d").status == 64)
        #expect(try await t.run("carevault-admin", ["approve"], home: "a").status == 64)
        #expect(try await t.run("carevault-patient", ["--help"]).status == 0)

        _ = try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin").path])
        let started = Date()
        let down = try await t.run(
            "carevault-patient",
            [
                "register", "--username", "alice", "--server", "http://127.0.0.1:9",
                "--admin-key", t.root.appendingPathComponent("admin/admin.pub").path, "--timeout", "120",
            ],
            home: "p",
            password: "long enough password"
        )
        #expect(down.status == 69, "\(down.stderr)")
        #expect(down.stderr.contains("hint:"))
        // Well under the 120 s budget even on a loaded machine (it took 13 s beside the whole suite on 2 cores).
        #expect(Date().timeIntervalSince(started) < 60, "a refused connection fails fast, not after the request deadline")
    }

    @Test func wholeStoryWithEveryRefusal() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let adminDir = t.root.appendingPathComponent("admin")
        let keygen = try await t.run("carevault-admin", ["keygen", "--out", adminDir.path])
        #expect(keygen.status == 0)
        let secret = adminDir.appendingPathComponent("admin.key")
        let pub = adminDir.appendingPathComponent("admin.pub")
        #expect((try FileManager.default.attributesOfItem(atPath: secret.path))[.posixPermissions] as? Int == 0o600)
        #expect((try FileManager.default.attributesOfItem(atPath: pub.path))[.posixPermissions] as? Int == 0o644, "the server's user reads it")
        let db = t.root.appendingPathComponent("server.sqlite")
        let (server, url) = try await t.startServer(adminPub: pub, database: db)
        defer {
            server.stopIfRunning()
        }
        let common = ["CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": secret.path]
        func patient(_ args: [String], password: String = "alice's long password") async throws -> Tools.Result {
            try await t.run("carevault-patient", args, home: "alice", password: password, extra: common)
        }
        func doctor(_ args: [String]) async throws -> Tools.Result {
            try await t.run("carevault-doctor", args, home: "bob", password: "bob's long password", extra: common)
        }
        func admin(_ args: [String]) async throws -> Tools.Result { try await t.run("carevault-admin", args, extra: common) }

        #expect(try await patient(["register", "--username", "alice"]).status == 0)
        let early = try await patient(["login", "--username", "alice"])
        #expect(early.status == 77, "not yet approved: \(early.stderr)")
        #expect(early.stderr.contains("waiting for admin approval"))
        let pending = try await admin(["pending", "--json"])
        #expect(pending.status == 0)
        let pendingJSON = try JSONSerialization.jsonObject(with: Data(pending.stdout.utf8)) as? [String: Any]
        #expect((pendingJSON?["registrations"] as? [Any])?.count == 1)
        #expect(try await admin(["approve", "--all"]).status == 0)

        let wrong = try await patient(["login", "--username", "alice"], password: "not the password")
        #expect(wrong.status == 77, "wrong password: \(wrong.stderr)")
        #expect(try await patient(["login", "--username", "alice", "--remember"]).status == 0)
        let add = try await patient([
            "activity", "add", "--id", "walk", "--title", "Walk 30 minutes", "--category", "interventions",
            "--schedule", "daily@08:00", "--start", "yesterday", "--json",
        ])
        #expect(add.status == 0, "\(add.stderr)")
        let added = try JSONSerialization.jsonObject(with: Data(add.stdout.utf8)) as? [String: Any]
        #expect(added?["title"] as? String == "Walk 30 minutes")
        #expect(
            try await patient(["outcome", "record", "--activity", "walk", "--date", "yesterday", "--value", "4200", "--units", "steps"]).status == 0
        )
        let list = try await patient(["activity", "list", "--json"])
        #expect((try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [Any])?.count == 1)
        #expect(
            try await patient(["activity", "add", "--id", "walk", "--title", "again", "--category", "interventions"]).status == 1,
            "a duplicate id is refused"
        )

        #expect(try await doctor(["register", "--username", "drbob"]).status == 0)
        #expect(try await admin(["approve", "--all"]).status == 0)
        #expect(try await doctor(["login", "--username", "drbob", "--remember"]).status == 0)
        #expect(try await patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
        let notYet = try await doctor(["show", "alice"])
        #expect(notYet.status == 77, "share not approved yet")
        #expect(try await admin(["approve", "--all"]).status == 0)

        // The server's database is tampered with before the doctor's first read: integrity failure, 65.
        let queue = try DatabaseQueue(path: db.path)
        let op = ServerOperator.sqliteFile(db.path)
        let original = try await queue.read { db -> (String, Data) in
            let row = try Row.fetchOne(
                db,
                sql: "SELECT v.version_id, v.envelope FROM versions v JOIN heads h ON h.version_id = v.version_id LIMIT 1"
            )!
            return (row[0], row[1])
        }
        let altered = try StoredEnvelopeText.edit(original.1) { text in
            var text = text
            let i = text.range(of: "\"ciphertext\":\"")!.upperBound
            text.replaceSubrange(i...i, with: text[i] == "A" ? "B" : "A")
            return text
        }
        try await op.dropGuard(of: .versions)
        try await op.replaceStoredEnvelope(of: original.0, with: [UInt8](altered))
        let tampered = try await doctor(["show", "alice"])
        #expect(tampered.status == 65, "tampered ciphertext: \(tampered.stderr)")
        #expect(tampered.stderr.contains("integrity"))
        try await op.replaceStoredEnvelope(of: original.0, with: [UInt8](original.1))
        // The keys follow the approval from the patient's device, at its next sync.
        let waiting = try await doctor(["show", "alice"])
        #expect(waiting.status == 0 && waiting.stderr.contains("keys not delivered yet"), "\(waiting.stderr)")
        #expect(try await patient(["sync"]).status == 0)

        let shown = try await doctor(["show", "alice", "--json", "--from", "yesterday"])
        #expect(shown.status == 0, "\(shown.stderr)")
        let view = try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any]
        #expect((view?["activities"] as? [[String: Any]])?.first?["title"] as? String == "Walk 30 minutes")
        #expect((try await doctor(["patients", "--json"]).stdout).contains("alice"))
        let adherence = try await doctor(["adherence", "alice", "--from", "yesterday", "--json"])
        #expect(adherence.status == 0)
        let fhir = try await doctor(["export", "alice", "--format", "fhir"])
        let bundle = try JSONSerialization.jsonObject(with: Data(fhir.stdout.utf8)) as? [String: Any]
        #expect(bundle?["resourceType"] as? String == "Bundle")
        let types = (bundle?["entry"] as? [[String: Any]])?.compactMap { ($0["resource"] as? [String: Any])?["resourceType"] as? String } ?? []
        #expect(types.contains("CarePlan") && types.contains("Observation") && types.contains("Patient"))
        #expect(try await doctor(["export", "alice", "--format", "csv"]).stdout.contains("4200"))
        try await Self.validateFHIR(fhir.stdout, in: t.root)

        #expect(try await patient(["share", "revoke", "--doctor", "drbob", "--category", "interventions"]).status == 0)
        let revoked = try await doctor(["show", "alice"])
        #expect(revoked.status == 77, "revoked share: \(revoked.stderr)")
        #expect(try await admin(["audit", "verify"]).status == 0)
        let who = try JSONSerialization.jsonObject(with: Data(try await patient(["whoami", "--json"]).stdout.utf8)) as? [String: String]
        #expect(who?["username"] == "alice" && who?["role"] == "patient")
        #expect(try await patient(["logout"]).status == 0)
        #expect(try await patient(["sync"]).status == 77, "after logout the session is gone")
        // Nothing the tools printed to stderr ever contains health data.
        #expect(!revoked.stderr.contains("Walk") && !tampered.stderr.contains("Walk"))
    }
}

/// The request time budget and the transport's failures as a user sees them: statuses and plain words.
extension CLITests {
    /// A listener that lets the kernel accept connections and never answers one (it never calls accept).
    static func silentListener() throws -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr = in_addr(s_addr: inet_addr("127.0.0.1"))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard fd >= 0, bound, listen(fd, 16) == 0 else { throw POSIXError(.EADDRNOTAVAIL) }
        return (fd, UInt16(bigEndian: addr.sin_port))
    }

    @Test func aSilentServerEndsWithinTheTimeout() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        _ = try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin").path])
        let (listener, port) = try Self.silentListener()
        defer { close(listener) }
        let args = [
            "login", "--username", "alice", "--server", "http://127.0.0.1:\(port)",
            "--admin-key", t.root.appendingPathComponent("admin/admin.pub").path,
        ]
        let started = Date()
        let silent = try await t.run("carevault-patient", args + ["--timeout", "2"], home: "p", password: "long enough password")
        let elapsed = Date().timeIntervalSince(started)
        #expect(silent.status == 75, "\(silent.stderr)")
        #expect(silent.stderr.hasPrefix("carevault-patient: error: the server did not answer within 2 s\nhint:"), "\(silent.stderr)")
        // The process start counts too: a loaded machine takes a second or more for it.
        #expect(elapsed >= 1.9 && elapsed < 4.5, "took \(elapsed) s")

        let fromEnv = try await t.run("carevault-patient", args, home: "p", password: "long enough password", extra: ["CAREVAULT_TIMEOUT": "1"])
        // The budget came from the environment: the whole request ended within 1 s, or (on a loaded machine,
        // where the one try's read deadline, half the budget, passes first and no second try fits) its try
        // gave up after 0.5 s.
        #expect(
            fromEnv.status == 75 && (fromEnv.stderr.contains("within 1 s") || fromEnv.stderr.contains("for 0.5 s")),
            "\(fromEnv.stderr)"
        )

        let words = try await t.run("carevault-patient", ["whoami", "--timeout", "soon"], home: "p")
        // Refused by the parser, with its usual message and the option's help.
        #expect(words.status == 64 && words.stderr.contains("The value 'soon' is invalid for '--timeout <seconds>'"), "\(words.stderr)")
        #expect(words.stderr.contains("Seconds each server request may take"), "\(words.stderr)")
        for bad in ["0", "0.05", "86401", "nan", "-1", "1e9"] {
            let r = try await t.run("carevault-patient", ["whoami", "--timeout=\(bad)"], home: "p")
            #expect(r.status == 64 && r.stderr.contains("is invalid for '--timeout <seconds>'"), "\(bad): \(r.stderr)")
        }
        let zero = try await t.run("carevault-patient", args, home: "p", password: "long enough password", extra: ["CAREVAULT_TIMEOUT": "0"])
        #expect(zero.status == 64 && zero.stderr.contains("CAREVAULT_TIMEOUT must be"), "\(zero.stderr)")
    }

    @Test func transportFailuresMapToTheirExitStatuses() {
        let unreadable = ToolRunner.describe(ClientError.unreadableAnswer("expected JSON from GET /v1/records; got 'text/html'"))
        #expect(unreadable.2 == .integrity)
        #expect(unreadable.0 == "the server sent an answer this tool cannot read (expected JSON from GET /v1/records; got 'text/html')")
        #expect(unreadable.1?.contains("--server") == true)
        #expect(ToolRunner.describe(ClientError.cutOff).2 == .temporary)
        #expect(ToolRunner.describe(ClientError.temporary("the server did not answer within 30 s")).2 == .temporary)
        #expect(ToolRunner.describe(ClientError.serverUnreachable("connection refused or no route to the server")).2 == .unreachable)
        // A forged signature keeps its own wording and hint.
        let forged = ToolRunner.describe(ClientError.integrity("the share does not verify"))
        #expect(forged.0 == "integrity check failed: the share does not verify" && forged.2 == .integrity)
        // A server that serves only newer tools (Docs/design.md §8): its message, the hint to upgrade, exit 78.
        let old = ToolRunner.describe(ClientError.upgradeRequired("this server serves clients from 0.11.0 on: upgrade the CareVault tools"))
        #expect(old.0 == "this server serves clients from 0.11.0 on: upgrade the CareVault tools" && old.2 == .upgradeRequired)
        #expect(old.1?.contains("upgrade the CareVault tools") == true && ExitStatus.upgradeRequired.rawValue == 78)
    }
}
