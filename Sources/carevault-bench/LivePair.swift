import Foundation
import NIOConcurrencyHelpers
import VaultClient
import VaultCore
import VaultCrypto

#if canImport(Glibc)
import Glibc
#endif

/// A patient sharing one category with a doctor, approved, the first record synced: the patient's device in
/// this process on one server, the doctor's home ready for the `watch` tool on another (or the same).
struct LivePair {
    let world: BenchWorld
    let doctorWorld: BenchWorld
    let vault: PatientVault
    let patientName: String
    let doctorName: String
    let admin: SigningKeyPair

    static func make(admin: SigningKeyPair, patientURL: String, doctorURL: String, root: URL) async throws -> LivePair {
        let id = shortID()
        let devices = root.appendingPathComponent("devices")
        let world = BenchWorld(baseURL: patientURL, admin: admin, root: devices)
        let doctorWorld = BenchWorld(baseURL: doctorURL, admin: admin, root: devices)
        let (patientName, doctorName) = ("patient-\(id)", "doctor-\(id)")
        let vault = try await world.patient(patientName)
        _ = try await doctorWorld.doctor(doctorName, remember: true)
        try await vault.addActivities([try BenchRecords.activity(id: "first")])
        _ = try await vault.grant(doctor: doctorName, category: BenchRecords.category)
        try await world.approveAll()
        _ = try await vault.sync()
        return LivePair(world: world, doctorWorld: doctorWorld, vault: vault, patientName: patientName, doctorName: doctorName, admin: admin)
    }

    /// Runs the doctor's `watch PATIENT --json` until `body` returns; `body` starts once it printed `subscribed`.
    func watching<T: Sendable>(folder: URL, _ body: (Watching) async throws -> T) async throws -> T {
        let keyFile = folder.appendingPathComponent("admin-\(shortID()).pub")
        try Data((admin.publicKey.base64URL + "\n").utf8).write(to: keyFile)
        // blocking: the bench; waited for only after SIGTERM, below
        let tool = Process()
        tool.executableURL = URL(fileURLWithPath: try DoctorMemoryBench.doctorTool())
        tool.arguments = ["watch", patientName, "--json"]
        tool.environment = ProcessInfo.processInfo.environment.merging([
            "CAREVAULT_HOME": doctorWorld.root.appendingPathComponent(doctorName).path,
            "CAREVAULT_SERVER": doctorWorld.baseURL,
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
            // blocking: after SIGTERM the watch ends within milliseconds (the bench, not a tool)
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
        _ = try await LiveBench.waitFor("subscribed", in: seen, process: tool)
        return try await body(Watching(vault: vault, seen: seen, tool: tool))
    }

    /// The patient's pushes timed against the watching tool's lines.
    struct Watching {
        let vault: PatientVault
        let seen: NIOLockedValueBox<[String: ContinuousClock.Instant]>
        let tool: Process

        func samples(_ reps: Int, label: String) async throws -> LiveResult {
            var samples: [Double] = []
            for _ in 0..<reps {
                let name = "live-\(shortID())\(shortID())"
                try await vault.addActivities([try BenchRecords.activity(id: name, title: "Live \(name)")])
                _ = try await vault.sync()
                let returned = ContinuousClock.now
                let printed = try await LiveBench.waitFor(name, in: seen, process: tool)
                samples.append(max(0, Measure.seconds(printed - returned) * 1000))
            }
            samples.sort()
            let result = LiveResult(
                samples: samples.count,
                p50Ms: Measure.percentile(sorted: samples, 50),
                p99Ms: Measure.percentile(sorted: samples, 99)
            )
            Progress.say(
                "live (\(label)): \(reps) changes, push returned to the doctor's line p50 \(fmt(result.p50Ms, 1)) ms, p99 \(fmt(result.p99Ms, 1)) ms"
            )
            return result
        }
    }
}
