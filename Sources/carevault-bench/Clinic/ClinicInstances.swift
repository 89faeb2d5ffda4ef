import Foundation
import NIOConcurrencyHelpers
import VaultCrypto

/// The clinic's server instances (the release carevault-server, each its own process) on one database,
/// with their peak memory watched across restarts.
final class ClinicInstances: Sendable {
    let database: String
    let adminKey: SigningPublicKey
    let folder: URL
    private let servers: NIOLockedValueBox<[ServerProcess]>
    private let peaks: NIOLockedValueBox<[Double]>

    private init(database: String, adminKey: SigningPublicKey, folder: URL, servers: [ServerProcess]) {
        self.database = database
        self.adminKey = adminKey
        self.folder = folder
        self.servers = NIOLockedValueBox(servers)
        self.peaks = NIOLockedValueBox(Array(repeating: 0, count: servers.count))
    }

    static func start(count: Int, database: String, adminKey: SigningPublicKey, folder: URL) async throws -> ClinicInstances {
        var servers: [ServerProcess] = []
        do {
            for i in 0..<count { servers.append(try await launch(i, port: 0, database: database, adminKey: adminKey, folder: folder)) }
        } catch {
            for s in servers { await s.stop() }
            throw error
        }
        return ClinicInstances(database: database, adminKey: adminKey, folder: folder, servers: servers)
    }

    private static func launch(_ i: Int, port: Int, database: String, adminKey: SigningPublicKey, folder: URL) async throws -> ServerProcess {
        try await ServerProcess.start(
            adminKey: adminKey,
            folder: folder.appendingPathComponent("instance-\(i)"),
            database: database,
            maxConnections: 4_000,
            port: port,
            logLevel: "warning",
            // Two instances on fixed ports: /metrics on the API port, not on port + 1 (the other's).
            extraArguments: ["--metrics-address", "api"]
        )
    }

    var urls: [String] { servers.withLockedValue { $0.map(\.baseURL) } }
    var count: Int { servers.withLockedValue { $0.count } }

    /// Reads every instance's peak RSS (VmHWM) into the running maximum; a killed instance's peak was read
    /// just before it died.
    func sample() {
        let now = servers.withLockedValue { $0.map { $0.peakMiB() ?? 0 } }
        peaks.withLockedValue { p in for (i, v) in now.enumerated() { p[i] = max(p[i], v) } }
    }

    /// The CPU seconds instance `i`'s current process used so far.
    func cpuSeconds(_ i: Int) -> Double? { ProcessCPU.seconds(pid: servers.withLockedValue { $0[i].pid }) }

    var peakMiB: [Double] {
        sample()
        return peaks.withLockedValue { $0 }
    }

    /// Kills instance `i` with SIGKILL and starts it again on its port after `after` seconds; returns when
    /// the new process listens.
    func crashAndRestart(_ i: Int, after: Double) async throws {
        sample()
        let old = servers.withLockedValue { $0[i] }
        old.crash()
        try await Task.sleep(for: .seconds(after))
        let restarted = try await Self.launch(i, port: old.port, database: database, adminKey: adminKey, folder: folder)
        servers.withLockedValue { $0[i] = restarted }
    }

    func stop() async {
        sample()
        for s in servers.withLockedValue({ $0 }) { await s.stop() }
    }
}
