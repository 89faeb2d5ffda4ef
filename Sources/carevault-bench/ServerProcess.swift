import Foundation
import NIOConcurrencyHelpers
import VaultCrypto

/// The `carevault-server` executable (the release build beside this one) run as its own process on
/// 127.0.0.1 and a port it picks (`--port 0`), so its memory can be read apart from the load clients'.
final class ServerProcess: Sendable {
    let baseURL: String
    let pid: Int32
    private let process: Process
    private let folder: URL

    private init(baseURL: String, process: Process, folder: URL) {
        self.baseURL = baseURL
        self.pid = process.processIdentifier
        self.process = process
        self.folder = folder
    }

    /// The server executable: `CAREVAULT_SERVER_BIN`, or `carevault-server` beside this executable.
    static func executable() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["CAREVAULT_SERVER_BIN"], !path.isEmpty {
            return URL(fileURLWithPath: path)
        }
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        let beside = me.deletingLastPathComponent().appendingPathComponent("carevault-server")
        guard FileManager.default.isExecutableFile(atPath: beside.path) else {
            throw BenchError("carevault-server not found beside \(me.path) (Scripts/bench builds both; or set CAREVAULT_SERVER_BIN)")
        }
        return beside
    }

    /// Starts the server on `database` (default: a fresh SQLite database in `folder`) and returns once it
    /// listens; `maxConnections` raises its connection cap (and with it the cap on event streams, half of it).
    /// `port` 0 lets the server pick one (a restarted instance is given its old one back).
    static func start(
        adminKey: SigningPublicKey,
        folder: URL,
        database: String? = nil,
        maxConnections: Int? = nil,
        port: Int = 0,
        logLevel: String = "error",
        extraArguments: [String] = []
    ) async throws -> ServerProcess {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let keyFile = folder.appendingPathComponent("admin.pub")
        try Data((adminKey.base64URL + "\n").utf8).write(to: keyFile)
        // blocking: the bench; every wait below follows a signal or an end seen by polling
        let process = Process()
        process.executableURL = try executable()
        process.arguments =
            [
                "--host", "127.0.0.1", "--port", String(port), "--database",
                database ?? ("sqlite:" + folder.appendingPathComponent("carevault.sqlite").path),
                "--admin-key", keyFile.path, "--log-level", logLevel,
                // The live section registers its crowd of idle subscribers from this one address.
                "--registrations-per-hour", "100000",
            ] + (maxConnections.map { ["--max-connections", String($0)] } ?? []) + extraArguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.standardError
        process.standardInput = FileHandle.nullDevice
        try process.run()

        // The server prints "carevault-server: listening on http://127.0.0.1:PORT" once it accepts connections.
        let line = NIOLockedValueBox<String?>(nil)
        let reader = Thread {
            var data = Data()
            while true {
                let chunk = out.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                data.append(chunk)
                if let text = String(data: data, encoding: .utf8), let end = text.firstIndex(of: "\n") {
                    line.withLockedValue { $0 = String(text[..<end]) }
                    break
                }
            }
        }
        reader.start()
        let deadline = Measure.clock.now + .seconds(30)
        while Measure.clock.now < deadline, process.isRunning, line.withLockedValue({ $0 }) == nil {
            try await Task.sleep(for: .milliseconds(20))
        }
        guard let text = line.withLockedValue({ $0 }), let range = text.range(of: "http://") else {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()  // blocking: after terminate(), or it had ended
            throw BenchError("carevault-server did not start (exit status \(process.isRunning ? -1 : process.terminationStatus))")
        }
        return ServerProcess(baseURL: String(text[range.lowerBound...]), process: process, folder: folder)
    }

    /// The server's current resident set size (VmRSS) in MiB.
    func currentMiB() -> Double? { ProcessMemory.field("VmRSS:", pid: pid) }

    /// The server's peak resident set size since it started, or since the last `resetPeak` (VmHWM), in MiB.
    func peakMiB() -> Double? { ProcessMemory.field("VmHWM:", pid: pid) }

    /// Resets the server's peak RSS to its current RSS (`/proc/PID/clear_refs`); false if the kernel refused.
    @discardableResult
    func resetPeak() -> Bool { ProcessMemory.resetPeak(pid: pid) }

    /// The port it listens on.
    var port: Int { Int(baseURL.split(separator: ":").last.map(String.init) ?? "") ?? 0 }

    /// SIGKILL, as a crashed machine or the OOM killer ends it: no graceful shutdown. The folder is kept.
    func crash() {
        if process.isRunning { kill(pid, SIGKILL) }
        process.waitUntilExit()  // blocking: after SIGKILL
    }

    /// SIGTERM (graceful shutdown), then SIGKILL after 10 s; removes the database folder.
    func stop() async {
        if process.isRunning {
            process.terminate()
            let deadline = Measure.clock.now + .seconds(10)
            while process.isRunning, Measure.clock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
            if process.isRunning { kill(pid, SIGKILL) }
        }
        process.waitUntilExit()  // blocking: it ended, or was killed
        try? FileManager.default.removeItem(at: folder)
    }
}

/// Runs `body` with a started server process and always stops it afterwards.
func withServerProcess<T: Sendable>(
    adminKey: SigningPublicKey,
    folder: URL,
    database: String? = nil,
    maxConnections: Int? = nil,
    _ body: (ServerProcess) async throws -> T
) async throws -> T {
    try await using(
        try await ServerProcess.start(adminKey: adminKey, folder: folder, database: database, maxConnections: maxConnections),
        release: { await $0.stop() },
        body
    )
}
