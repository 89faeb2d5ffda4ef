import Foundation
import GRDB
import Testing
import VaultCore
import VaultCrypto

@testable import VaultClient

/// A seeded generator (SplitMix64), so a run that fails can be replayed: the seed is printed, and
/// `CAREVAULT_SEED` reruns it.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `CAREVAULT_SEED` when set, else a fresh random seed; printed either way with how to replay it.
    static func seed(for test: String) -> UInt64 {
        let seed = ProcessInfo.processInfo.environment["CAREVAULT_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
        print("\(test): seed \(seed) (replay with CAREVAULT_SEED=\(seed))")
        return seed
    }
}

/// The server databases the fault tests run on: a SQLite file, or a new database in the PostgreSQL
/// cluster of `CAREVAULT_TEST_POSTGRES_URL` (made and dropped with psql).
enum FaultBackend: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite, postgres
    var testDescription: String { rawValue }
}

/// carevault-server as a separate process that a test can SIGKILL and start again on the same port and
/// database (the tools keep one profile per server URL, so the URL must not change).
final class ServerProcess {
    let adminPub: URL
    let database: ServerDatabase
    let log: URL
    private(set) var process: ChildProcess?
    private(set) var url = ""

    init(adminPub: URL, database: ServerDatabase, log: URL) {
        self.adminPub = adminPub
        self.database = database
        self.log = log
    }

    /// Starts the server (on a free port the first time, on the same port afterwards) and waits until it listens.
    func start() async throws {
        let port = url.isEmpty ? "0" : String(url.split(separator: ":").last!)
        let p = ChildProcess()
        p.executableURL = Tools.bin.appendingPathComponent("carevault-server")
        // Metrics on a free port: the default (the API port + 1) may be taken when the server restarts on its port.
        p.arguments = [
            "--admin-key", adminPub.path, "--port", port, "--database", database.url, "--log-level", "warning", "--metrics-address", "127.0.0.1:0",
        ]
        p.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CAREVAULT_") }
        p.standardOutput = try ChildStdio.output(to: log)
        p.standardError = .null
        try p.run()
        process = p
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let text = try? String(contentsOf: log, encoding: .utf8),
                let r = text.range(of: "http://127.0.0.1:[0-9]+", options: .regularExpression)
            {
                url = String(text[r])
                return
            }
            if !p.isRunning { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        p.signalIfRunning(SIGTERM)
        throw Tools.ToolMissing(path: "carevault-server did not start on \(database.backend) within 30 s")
    }

    /// SIGKILL: no graceful shutdown, open transactions are cut off wherever they are. Returns once the
    /// server has ended.
    func kill() async {
        guard let p = process else { return }
        p.signalIfRunning(SIGKILL)
        try? await p.exited()
        process = nil
    }

    /// SIGTERM; returns once the server has ended (SIGKILL after `ChildProcess.exited`'s limit).
    func stop() async {
        guard let p = process, p.isRunning else { return }
        await p.stop()
        process = nil
    }

    /// SIGTERM without waiting (`ChildProcess.stopIfRunning`): for `defer` blocks, where nothing follows that
    /// needs the server gone. Code that does (a restart on the same port, a database dropped) awaits `stop()`.
    func stopIfRunning() {
        process?.stopIfRunning()
    }
}

/// A tool started without waiting for it, so the test can kill it mid-way.
struct RunningTool {
    let process: ChildProcess

    static func start(_ t: Tools, _ tool: String, _ args: [String], home: String, extra: [String: String]) throws -> RunningTool {
        let p = ChildProcess()
        p.executableURL = Tools.bin.appendingPathComponent(tool)
        p.arguments = args
        var e = t.env.merging(extra) { _, b in b }
        e["CAREVAULT_HOME"] = t.root.appendingPathComponent(home).path
        p.environment = e
        p.standardOutput = .null
        p.standardError = .null
        p.standardInput = .null
        try p.run()
        return RunningTool(process: p)
    }

    /// Kills the tool with SIGKILL unless it already ended; true when the kill cut it off.
    @discardableResult
    func kill() async -> Bool {
        process.signalIfRunning(SIGKILL)
        guard (try? await process.exited()) != nil else { return false }
        return process.endedBySignal && process.terminationStatus == SIGKILL
    }

    /// Waits for the tool off the test's pool (`Tools.offPool`); its exit status.
    func wait() async throws -> Int32 {
        let process = process
        return try await Tools.offPool {
            // blocking: inside Tools.offPool
            try process.waitForExit()
            return process.terminationStatus
        }
    }
}

/// A deployment for the fault tests: an admin key, a server process on a fresh database, and patient
/// alice registered, approved and logged in (with `--remember`) by the patient tool in home "alice".
struct FaultWorld {
    static let password = "alice's long password"
    let tools: Tools
    let server: ServerProcess
    let adminKey: SigningPublicKey
    let common: [String: String]

    /// Runs `body` in a new world on `backend`; returns without running it when the backend is not configured.
    /// Whatever happens, thrown errors included, the server is then stopped, its database dropped and the
    /// world's folder removed, in that order and each awaited (not in a `defer`, which cannot await: a
    /// synchronous wait there would hold one of the pool's threads).
    static func run(_ backend: FaultBackend, _ body: (FaultWorld) async throws -> Void) async throws {
        let tools = try Tools()
        var database: ServerDatabase?
        var server: ServerProcess?
        var failure: (any Error)?
        do {
            database = try await ServerDatabase.make(backend, in: tools.root)
            if let database {
                let adminDir = tools.root.appendingPathComponent("admin")
                #expect(try await tools.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
                let pub = adminDir.appendingPathComponent("admin.pub")
                let started = ServerProcess(adminPub: pub, database: database, log: tools.root.appendingPathComponent("server.out"))
                server = started
                try await started.start()
                let key = try SigningPublicKey(
                    base64URL: try String(contentsOf: pub, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
                )
                let common = [
                    "CAREVAULT_SERVER": started.url, "CAREVAULT_ADMIN_KEY": pub.path,
                    "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path,
                ]
                let world = FaultWorld(tools: tools, server: started, adminKey: key, common: common)
                #expect(try await world.patient(["register", "--username", "alice"]).status == 0)
                #expect(try await tools.run("carevault-admin", ["approve", "--all"], extra: common).status == 0)
                let login = try await world.patient(["login", "--username", "alice", "--remember"])
                #expect(login.status == 0, "\(login.stderr)")
                try await body(world)
            }
        } catch {
            failure = error
        }
        await server?.stop()
        await database?.drop()
        try? FileManager.default.removeItem(at: tools.root)
        if let failure { throw failure }
    }

    @discardableResult
    func patient(_ args: [String], home: String = "alice") async throws -> Tools.Result {
        try await tools.run("carevault-patient", args, home: home, password: Self.password, extra: common)
    }

    func startPatient(_ args: [String], home: String = "alice") throws -> RunningTool {
        try RunningTool.start(
            tools,
            "carevault-patient",
            args,
            home: home,
            extra: common.merging(["CAREVAULT_PASSWORD": Self.password]) { _, b in b }
        )
    }

    /// The vault of the patient tool's home `home`, opened in this process as the tool opens it.
    func vault(home: String = "alice") async throws -> PatientVault {
        let config = ClientConfiguration(server: server.url, home: Home(url: tools.root.appendingPathComponent(home)), adminKey: adminKey)
        let transport = try Transport(baseURL: server.url)
        let account = try await AccountManager(configuration: config, transport: transport).unlock(password: Self.password)
        return try PatientVault(account: account, transport: transport, adminKey: adminKey)
    }

    /// Logs alice in on a new device home in this process (its profile and store are new).
    func newDevice(_ home: String) async throws -> PatientVault {
        let config = ClientConfiguration(server: server.url, home: Home(url: tools.root.appendingPathComponent(home)), adminKey: adminKey)
        let transport = try Transport(baseURL: server.url)
        let account = try await AccountManager(configuration: config, transport: transport).login(username: "alice", password: Self.password)
        return try PatientVault(account: account, transport: transport, adminKey: adminKey)
    }

    /// Records `count` outcomes of activity `activity` offline, starting at occurrence `first`, in one local
    /// transaction (an import): one value each, whose number is the occurrence.
    static func importOutcomes(_ vault: PatientVault, activity: String, category: String, first: Int, count: Int) async throws {
        let key = vault.account.identity.recordIDKey
        let at = Date(unixMillis: 1_767_254_400_000)
        let changes = (first..<first + count).map { n in
            LocalChange(
                record: .outcome(
                    Outcome(
                        activityID: activity,
                        occurrence: n,
                        values: [OutcomeValue(value: .number(Double(n)), units: "steps", createdAt: at)],
                        createdAt: at
                    )
                ),
                type: .outcome,
                recordID: RecordID.make(type: .outcome, activityID: activity, occurrence: n, key: key),
                category: category
            )
        }
        try await vault.write(changes)
    }

    /// An activity in `category` that outcomes can be recorded for.
    static func activity(_ id: String, category: String = "interventions") throws -> Activity {
        try Activity(
            id: id,
            title: "Walk \(id)",
            category: category,
            schedule: Schedule.dailyAtTimes(
                start: Date(unixMillis: 1_767_254_400_000),
                end: nil,
                times: [DateComponents(hour: 8, minute: 0)],
                timeZone: TimeZone(identifier: "UTC")!
            ),
            createdAt: Date(unixMillis: 1_767_254_400_000)
        )
    }
}

extension ServerProcess {
    /// Kills the server once it has stored `threshold` versions, `delay` ms later; returns the count seen
    /// then. The polling and the kill run off the test's pool (`Tools.offPool`): with the other suites
    /// running, the pool's two threads can be busy for longer than a whole push takes, and the kill then
    /// always came after the push. Failures to count are printed; the kill comes after `timeout` anyway.
    func kill(whenVersionsReach threshold: Int, after delay: Int, timeout: TimeInterval = 60) async throws -> Int {
        guard let process else { throw Tools.ToolMissing(path: "a running carevault-server") }
        let database = database
        return try await Tools.offPool {
            var seen = 0
            do {
                let count = try database.versionCounter()
                let deadline = Date().addingTimeInterval(timeout)
                while seen < threshold && Date() < deadline {
                    do { seen = try count() } catch { print("note: counting the server's versions failed: \(error)") }
                    // blocking: inside Tools.offPool
                    if seen < threshold { usleep(2_000) }
                }
            } catch { print("note: could not open the server's database: \(error)") }
            // blocking: inside Tools.offPool
            usleep(useconds_t(delay * 1_000))
            process.signalIfRunning(SIGKILL)
            return seen
        }
    }
}

/// `body`, then `cleanup`, whether `body` returned or threw (its error is rethrown after `cleanup`): what a
/// `defer` does, for a cleanup that must be awaited (a `defer` cannot await, and a synchronous wait there
/// would hold one of the pool's threads).
func withCleanup<T>(
    isolation: isolated (any Actor)? = #isolation,
    _ body: () async throws -> T,
    cleanup: () async -> Void
) async throws -> T {
    let result: T
    do {
        result = try await body()
    } catch {
        await cleanup()
        throw error
    }
    await cleanup()
    return result
}
