import Foundation
import NIOConcurrencyHelpers
import VaultClient
import VaultCore
import VaultCrypto

#if canImport(Glibc)
import Glibc
#endif

/// From a patient's push returning to a watching doctor's tool printing the change (Docs/benchmarks.md §8).
struct LiveResult: Sendable {
    var samples: Int
    var p50Ms: Double
    var p99Ms: Double
}

/// Everything the live section measured: alone on SQLite, with `idle` other streams open (and the server's
/// memory per stream), and across two PostgreSQL instances.
struct LiveReport: Sendable {
    var alone: LiveResult
    var idle: Int
    var crowded: LiveResult?
    /// The server's RSS per idle stream: the first streams a fresh server opens (the figure).
    var kibPerSubscriber: Double?
    /// The same count opened again after the first ones ended: what the process reuses is not counted again.
    var kibPerSubscriberWarm: Double?
    /// The floor, measured the same two ways: idle keep-alive connections with no stream on them.
    var kibPerConnection: Double?
    var kibPerConnectionWarm: Double?
    var pg2: LiveResult?
}

/// The release carevault-doctor running `watch PATIENT --json` in its own process against the release
/// carevault-server; the patient, in this process, adds one activity and syncs, `reps` times, one at a
/// time. Each sample is the time from `sync()` returning to the tool's line for that activity being read
/// from its stdout. A line read before the push returned (the event can outrun the push's answer) counts
/// as 0.
struct LiveBench {
    let reps: Int
    /// Other streams open during the crowded run (`live_p99_ms_1000` names the full run's 1,000).
    let idle: Int
    let root: URL

    func run() async throws -> LiveReport {
        let admin = SigningKeyPair.generate()
        let folder = root.appendingPathComponent("live-\(shortID())")
        defer { try? FileManager.default.removeItem(at: folder) }
        // Twice the streams for the connection cap: the hub's per-instance cap is half of it.
        let cap = 2 * (idle + 64)
        var report = try await withServerProcess(adminKey: admin.publicKey, folder: folder.appendingPathComponent("server"), maxConnections: cap) {
            server in
            let pair = try await LivePair.make(admin: admin, patientURL: server.baseURL, doctorURL: server.baseURL, root: folder)
            return try await pair.watching(folder: folder) { watch in
                let alone = try await watch.samples(reps, label: "alone")
                var report = LiveReport(alone: alone, idle: idle)
                guard idle > 0 else { return report }
                // Twice the accounts: the first crowd opens and closes its streams so that what the server
                // grows once (its database connections' caches, the pools of its event loops) has grown before
                // the measurement; the second crowd is measured. The first crowd's streams end at their next
                // heartbeat (at most 20 s), when writing to a closed connection fails.
                let warm = try await IdleStreams.accounts(idle, world: pair.world)
                try await Task.sleep(for: .seconds(1))
                let cold = server.currentMiB()
                let first = try await IdleStreams.open(warm, baseURL: server.baseURL)
                try await Task.sleep(for: .seconds(2))
                if let cold, let grown = server.currentMiB() { report.kibPerSubscriber = (grown - cold) * 1_024 / Double(idle) }
                await first.close()
                let crowd = try await IdleStreams.accounts(idle, world: pair.world)
                try await Task.sleep(for: .seconds(25))
                let before = server.currentMiB()
                let streams = try await IdleStreams.open(crowd, baseURL: server.baseURL)
                try await Task.sleep(for: .seconds(2))
                let after = server.currentMiB()
                if let before, let after { report.kibPerSubscriberWarm = (after - before) * 1_024 / Double(idle) }
                Progress.say("live: \(idle) idle streams open; server RSS \(fmt(before ?? 0, 1)) -> \(fmt(after ?? 0, 1)) MiB")
                report.crowded = try await watch.samples(reps, label: "with \(idle) idle streams")
                await streams.close()
                return report
            }
        }
        // The floor, on a server of its own (memory freed by one measurement would be reused by the other):
        // as many idle keep-alive connections with no stream on them.
        if idle > 0 {
            let (cold, warm) = try await withServerProcess(
                adminKey: admin.publicKey,
                folder: folder.appendingPathComponent("plain"),
                maxConnections: cap
            ) { server in
                // Opened twice, as the streams are: the first time on the fresh server, then again.
                var figures: [Double?] = []
                for _ in 0..<2 {
                    try await Task.sleep(for: .seconds(2))
                    let before = server.currentMiB()
                    let plain = try PlainConnections.open(idle, baseURL: server.baseURL)
                    try await Task.sleep(for: .seconds(2))
                    let after = server.currentMiB()
                    plain.close()
                    figures.append(before.flatMap { b in after.map { ($0 - b) * 1_024 / Double(idle) } })
                    Progress.say("live: \(idle) idle keep-alive connections; server RSS \(fmt(before ?? 0, 1)) -> \(fmt(after ?? 0, 1)) MiB")
                }
                return (figures[0], figures[1])
            }
            (report.kibPerConnection, report.kibPerConnectionWarm) = (cold, warm)
        }
        if let url = BenchDatabase.postgresURL {
            report.pg2 = try await pg2(url: url, admin: admin, folder: folder)
        } else {
            Progress.say("live: no PostgreSQL (CAREVAULT_TEST_POSTGRES_URL); live_p99_ms_pg2 not measured")
        }
        return report
    }

    /// Two server processes on one fresh PostgreSQL database: the patient pushes to the first, the doctor's
    /// tool watches through the second, so every change crosses LISTEN/NOTIFY.
    func pg2(url: String, admin: SigningKeyPair, folder: URL) async throws -> LiveResult {
        try await withDatabase(.postgres, root: folder) { db in
            guard let dbURL = db.url else { throw BenchError("the PostgreSQL benchmark database has no URL") }
            return try await withServerProcess(adminKey: admin.publicKey, folder: folder.appendingPathComponent("a"), database: dbURL) { a in
                try await withServerProcess(adminKey: admin.publicKey, folder: folder.appendingPathComponent("b"), database: dbURL) { b in
                    let pair = try await LivePair.make(
                        admin: admin,
                        patientURL: a.baseURL,
                        doctorURL: b.baseURL,
                        root: folder.appendingPathComponent("pg2")
                    )
                    return try await pair.watching(folder: folder) { try await $0.samples(reps, label: "PostgreSQL, two instances") }
                }
            }
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
