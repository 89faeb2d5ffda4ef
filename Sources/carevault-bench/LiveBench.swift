import Foundation
import NIOConcurrencyHelpers
import VaultClient
import VaultCore
import VaultCrypto

#if canImport(Glibc)
import Glibc
#endif

/// From a patient's push returning to a watching doctor's tool printing the change (Docs/events.md §9).
struct LiveResult: Sendable {
    var samples: Int
    var p50Ms: Double
    var p99Ms: Double
}

/// The release carevault-doctor running `watch PATIENT --json` in its own process against the release
/// carevault-server (SQLite); the patient, in this process, adds one activity and syncs, `reps` times, one
/// at a time. Each sample is the time from `sync()` returning to the tool's line for that activity being
/// read from its stdout. A line read before the push returned (the event can outrun the push's answer)
/// counts as 0.
struct LiveBench {
    let reps: Int
    let root: URL

    func run() async throws -> LiveResult {
        let admin = SigningKeyPair.generate()
        let id = shortID()
        let folder = root.appendingPathComponent("live-\(id)")
        defer { try? FileManager.default.removeItem(at: folder) }
        return try await withServerProcess(adminKey: admin.publicKey, folder: folder.appendingPathComponent("server")) { server in
            let world = BenchWorld(baseURL: server.baseURL, admin: admin, root: folder.appendingPathComponent("devices"))
            let patientName = "patient-\(id)"
            let doctorName = "doctor-\(id)"
            let vault = try await world.patient(patientName)
            _ = try await world.doctor(doctorName, remember: true)
            try await vault.addActivities([try BenchRecords.activity(id: "first")])
            _ = try await vault.grant(doctor: doctorName, category: BenchRecords.category)
            try await world.approveAll()
            _ = try await vault.sync()

            let keyFile = folder.appendingPathComponent("admin.pub")
            try Data((admin.publicKey.base64URL + "\n").utf8).write(to: keyFile)
            let tool = Process()
            tool.executableURL = URL(fileURLWithPath: try DoctorMemoryBench.doctorTool())
            tool.arguments = ["watch", patientName, "--json"]
            tool.environment = ProcessInfo.processInfo.environment.merging([
                "CAREVAULT_HOME": world.root.appendingPathComponent(doctorName).path,
                "CAREVAULT_SERVER": server.baseURL,
                "CAREVAULT_ADMIN_KEY": keyFile.path,
                "CAREVAULT_PASSWORD": BenchWorld.password,
            ]) { _, new in new }
            let pipe = Pipe()
            tool.standardOutput = pipe
            tool.standardError = FileHandle.nullDevice
            tool.standardInput = FileHandle.nullDevice
            let seen = NIOLockedValueBox<[String: ContinuousClock.Instant]>([:])
            try tool.run()
            defer {
                if tool.isRunning { kill(tool.processIdentifier, SIGTERM) }
                tool.waitUntilExit()
            }
            let reader = pipe.fileHandleForReading
            Thread.detachNewThread {
                var pending = Data()
                while true {
                    let chunk = reader.availableData
                    if chunk.isEmpty { return }
                    pending.append(chunk)
                    while let newline = pending.firstIndex(of: 0x0A) {
                        let line = pending[pending.startIndex..<newline]
                        pending = Data(pending[pending.index(after: newline)...])
                        let now = ContinuousClock.now
                        guard let object = try? JSONSerialization.jsonObject(with: line) as? [String: Any] else { continue }
                        let key = (object["event"] as? String == "change" ? object["id"] as? String : object["event"] as? String) ?? ""
                        seen.withLockedValue { $0[key] = $0[key] ?? now }
                    }
                }
            }
            _ = try await Self.waitFor("subscribed", in: seen, process: tool)
            var samples: [Double] = []
            for i in 0..<reps {
                let name = "live-\(i)"
                try await vault.addActivities([try BenchRecords.activity(id: name, title: "Live \(i)")])
                _ = try await vault.sync()
                let returned = ContinuousClock.now
                let printed = try await Self.waitFor(name, in: seen, process: tool)
                samples.append(max(0, Measure.seconds(printed - returned) * 1000))
            }
            samples.sort()
            let result = LiveResult(
                samples: samples.count,
                p50Ms: Measure.percentile(sorted: samples, 50),
                p99Ms: Measure.percentile(sorted: samples, 99)
            )
            Progress.say("live: \(reps) changes, push returned to the doctor's line p50 \(fmt(result.p50Ms, 1)) ms, p99 \(fmt(result.p99Ms, 1)) ms")
            return result
        }
    }

    /// When the line `key` was read; the tool must print it within 30 s.
    static func waitFor(
        _ key: String,
        in seen: NIOLockedValueBox<[String: ContinuousClock.Instant]>,
        process: Process
    ) async throws
        -> ContinuousClock.Instant
    {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let at = seen.withLockedValue({ $0[key] }) { return at }
            guard process.isRunning else { throw BenchError("carevault-doctor watch ended with status \(process.terminationStatus)") }
            try await Task.sleep(for: .milliseconds(1))
        }
        throw BenchError("carevault-doctor watch printed no line for \(key) within 30 s")
    }
}
