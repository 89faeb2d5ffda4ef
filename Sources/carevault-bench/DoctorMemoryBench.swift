import Foundation
import NIOConcurrencyHelpers
import VaultClient
import VaultCore
import VaultCrypto

#if canImport(Glibc)
import Glibc
#endif

/// The doctor's tool reading a large share for the first time (Docs/benchmarks.md §7).
struct DoctorMemoryResult: Sendable {
    var records: Int
    /// The wall time of the doctor's command: pull, verify, cache, decrypt and print.
    var seconds: Double
    /// The command's peak resident set size (its own `VmHWM`, sampled every 10 ms).
    var peakRSSMiB: Double
    /// Activities in the command's output (must equal `records`: the figure counts only a complete read).
    var shown: Int

    var recordsPerSecond: Double { Double(records) / seconds }
}

/// A patient with `records` activities in one shared category, on the release carevault-server in its own
/// process; then the release carevault-doctor, run as a doctor would on a new device
/// (`carevault-doctor show PATIENT --json`), in a process of its own, so that its peak memory is its own.
struct DoctorMemoryBench {
    let records: Int
    let root: URL

    /// The activities' instructions are this long, so each payload pads to the 480-byte bucket, like the
    /// 500 B records of the push and pull figures.
    static let instructionsLength = 300

    func run() async throws -> DoctorMemoryResult {
        let admin = SigningKeyPair.generate()
        let id = shortID()
        let folder = root.appendingPathComponent("doctor-memory-\(id)")
        defer { try? FileManager.default.removeItem(at: folder) }
        return try await withServerProcess(adminKey: admin.publicKey, folder: folder.appendingPathComponent("server")) { server in
            let world = BenchWorld(baseURL: server.baseURL, admin: admin, root: folder.appendingPathComponent("devices"))
            let patientName = "patient-\(id)"
            let doctorName = "doctor-\(id)"
            let vault = try await world.patient(patientName)
            // A doctor who logged in with --remember: the tool unlocks with the device key, so the figure is
            // the read's, not the password's Argon2id (256 MiB by default, paid at login).
            _ = try await world.doctor(doctorName, remember: true)
            let instructions = String(repeating: "x", count: Self.instructionsLength)
            let (_, fillSeconds) = try await Measure.timeAsync {
                for start in stride(from: 0, to: records, by: 5_000) {
                    let list = try (start..<min(start + 5_000, records)).map { i in
                        var a = try BenchRecords.activity(id: String(format: "act-%07d", i), title: "Activity \(i)")
                        a.instructions = instructions
                        return a
                    }
                    try await vault.addActivities(list)
                }
                _ = try await vault.grant(doctor: doctorName, category: BenchRecords.category)
                try await world.approveAll()
                let pushed = try await vault.sync()
                guard pushed.pushed >= records else { throw BenchError("the patient pushed \(pushed.pushed) of \(records)") }
            }
            Progress.say("doctor memory: \(records) activities pushed and shared in \(fmt(fillSeconds, 1)) s (not timed)")

            let keyFile = folder.appendingPathComponent("admin.pub")
            try Data((admin.publicKey.base64URL + "\n").utf8).write(to: keyFile)
            let output = folder.appendingPathComponent("shown.json")
            let errors = folder.appendingPathComponent("doctor.err")
            let environment = [
                "CAREVAULT_HOME": world.root.appendingPathComponent(doctorName).path,
                "CAREVAULT_SERVER": server.baseURL,
                "CAREVAULT_ADMIN_KEY": keyFile.path,
                "CAREVAULT_PASSWORD": BenchWorld.password,
                "CAREVAULT_TIMEOUT": "600",
            ]
            let started = ContinuousClock.now
            let run = try await ToolRun.detached(
                try Self.doctorTool(),
                ["show", patientName, "--json"],
                environment: environment,
                stdout: output,
                stderr: errors
            )
            let seconds = Measure.seconds(ContinuousClock.now - started)
            guard run.status == 0 else {
                let said = (try? String(contentsOf: errors, encoding: .utf8)).map { String($0.suffix(500)) } ?? ""
                throw BenchError("carevault-doctor show ended with status \(run.status): \(said)")
            }
            let shown = try Self.activities(in: output)
            guard shown == records else { throw BenchError("carevault-doctor show listed \(shown) activities, expected \(records)") }
            let result = DoctorMemoryResult(records: records, seconds: seconds, peakRSSMiB: run.peakRSSMiB, shown: shown)
            Progress.say(
                "doctor memory: carevault-doctor show of \(records) records took \(fmt(seconds, 1)) s "
                    + "(\(fmt(result.recordsPerSecond, 0)) records/s), peak RSS \(fmt(run.peakRSSMiB, 1)) MiB"
            )
            return result
        }
    }

    /// `carevault-doctor` beside this executable (Scripts/bench builds it).
    static func doctorTool() throws -> String {
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        let beside = me.deletingLastPathComponent().appendingPathComponent("carevault-doctor")
        guard FileManager.default.isExecutableFile(atPath: beside.path) else {
            throw BenchError("carevault-doctor not found beside \(me.path) (Scripts/bench builds it)")
        }
        return beside.path
    }

    /// How many activities the `show --json` output at `url` lists.
    static func activities(in url: URL) throws -> Int {
        struct Shown: Decodable { var activities: [Discarded] }
        struct Discarded: Decodable {}
        return try JSONDecoder().decode(Shown.self, from: Data(contentsOf: url)).activities.count
    }
}

/// A tool run to its end in a child process, with its exit status and its own peak memory (VmHWM).
struct ToolRun: Sendable {
    var status: Int32
    var peakRSSMiB: Double

    /// Runs `path` with `arguments` and `environment` added to this process's, stdout and stderr to files,
    /// and waits on a thread of its own (not a cooperative one).
    static func detached(_ path: String, _ arguments: [String], environment: [String: String], stdout: URL, stderr: URL) async throws -> ToolRun {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(with: Result { try run(path, arguments, environment: environment, stdout: stdout, stderr: stderr) })
            }
        }
    }

    static func run(_ path: String, _ arguments: [String], environment: [String: String], stdout: URL, stderr: URL) throws -> ToolRun {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, stderr.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        var merged = ProcessInfo.processInfo.environment
        merged.merge(environment) { _, new in new }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, path, &actions, nil, argv, envp)
        guard spawned == 0 else { throw BenchError("cannot start \(path): \(String(cString: strerror(spawned)))") }
        // The child's own high-water mark (VmHWM), read every 10 ms until it ends; being a high-water mark,
        // it misses only growth in the last 10 ms. Not wait4's ru_maxrss: posix_spawn starts the child on
        // this process's memory, and exec carries that memory's high-water mark over, so ru_maxrss reports
        // at least this process's own peak. Reading starts once posix_spawn returned, after the exec.
        let child = pid
        let peak = NIOLockedValueBox<Double>(0)
        let done = NIOLockedValueBox(false)
        // blocking: ToolRun.run runs on a thread of its own (ToolRun.detached)
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            while !done.withLockedValue({ $0 }) {
                if let hwm = ProcessMemory.field("VmHWM:", pid: child) { peak.withLockedValue { $0 = max($0, hwm) } }
                // blocking: on the sampler thread
                Thread.sleep(forTimeInterval: 0.01)
            }
            stopped.signal()
        }
        // The end is awaited without reaping, so the pid cannot be reused while it is still being read.
        var info = siginfo_t()
        // blocking: ToolRun.run runs on a thread of its own (ToolRun.detached)
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 {
            guard errno == EINTR else { throw BenchError("waiting for \(path): \(String(cString: strerror(errno)))") }
        }
        done.withLockedValue { $0 = true }
        // blocking: ToolRun.run runs on a thread of its own (ToolRun.detached)
        stopped.wait()
        var status: Int32 = 0
        // blocking: ToolRun.run runs on a thread of its own (ToolRun.detached)
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { throw BenchError("waiting for \(path): \(String(cString: strerror(errno)))") }
        }
        let exit = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return ToolRun(status: exit, peakRSSMiB: peak.withLockedValue { $0 })
    }
}
