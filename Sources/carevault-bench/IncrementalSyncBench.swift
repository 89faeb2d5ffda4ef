import Foundation
import VaultClient
import VaultCore
import VaultCrypto

/// The time to sync one changed record when the store holds few or many records (Docs/benchmarks.md §4).
struct IncrementalSyncResult: Sendable {
    var records: Int
    var samplesMs: [Double]
    var medianMs: Double { Measure.median(samplesMs) }
}

/// One patient device with `records` records, synced both ways, on its own SQLite server: the server's
/// store and the device's local store both hold every record.
final class IncrementalStore: Sendable {
    let records: Int
    let vault: PatientVault
    private let database: BenchDatabase
    private let server: BenchServer
    private let folder: URL

    private init(records: Int, vault: PatientVault, database: BenchDatabase, server: BenchServer, folder: URL) {
        self.records = records
        self.vault = vault
        self.database = database
        self.server = server
        self.folder = folder
    }

    static func make(records: Int, root: URL) async throws -> IncrementalStore {
        let admin = SigningKeyPair.generate()
        let database = try await BenchDatabase.make(.sqlite, root: root)
        let server: BenchServer
        do { server = try await BenchServer.start(repository: database.repository, adminKey: admin.publicKey) } catch {
            await database.close()
            throw error
        }
        let world = BenchWorld(server: server, admin: admin, root: root.appendingPathComponent("incremental-\(shortID())"))
        do {
            let vault = try await world.patient("patient-\(shortID())")
            // Fill: activities created in local transactions of 5,000, pushed, then pulled back, so the
            // device's cursor is current and the timed syncs carry only the change.
            let (_, fillSeconds) = try await Measure.timeAsync {
                for start in stride(from: 0, to: records, by: 5_000) {
                    let list = try (start..<min(start + 5_000, records)).map { i in
                        try BenchRecords.activity(id: Self.activityID(i), title: "Activity \(i)")
                    }
                    try await vault.addActivities(list)
                }
                let pushed = try await vault.sync()
                guard pushed.pushed == records else { throw BenchError("fill pushed \(pushed.pushed) of \(records)") }
                // The device's own pushes come back as its own copy, byte for byte, which a sync does not
                // count as received (`SyncSummary.pulled`): nothing new either way.
                let back = try await vault.sync()
                guard back.pulled == 0, back.pushed == 0, try await vault.pendingCount() == 0 else {
                    throw BenchError("the fill's second sync received \(back.pulled) and pushed \(back.pushed), expected none")
                }
            }
            let stored = try await database.floor.storedEnvelopes().count
            guard stored == records else { throw BenchError("the server holds \(stored) versions, expected \(records)") }
            Progress.say("incremental: store of \(records) records filled and synced both ways in \(fmt(fillSeconds, 1)) s (not timed)")
            return IncrementalStore(records: records, vault: vault, database: database, server: server, folder: world.root)
        } catch {
            await server.stop()
            await database.close()
            try? FileManager.default.removeItem(at: world.root)
            throw error
        }
    }

    static func activityID(_ i: Int) -> String { String(format: "act-%07d", i) }

    /// Changes one activity locally (not timed) and times the sync that follows: tresor check, pull of
    /// the previous round's change (its own push coming back), push of this one. Returns milliseconds.
    func changeAndSync(round: Int) async throws -> Double {
        var activity = try BenchRecords.activity(id: Self.activityID((round * 7_919) % records), title: "Changed \(round)")
        activity.instructions = "round \(round)"
        try await vault.updateActivity(activity)
        let (summary, seconds) = try await Measure.timeAsync { try await vault.sync() }
        // The previous round's change comes back as this device's own copy: pulled and compared, not
        // counted as received (`SyncSummary.pulled`).
        guard summary.pushed == 1, summary.rejected.isEmpty, summary.pulled == 0 else {
            throw BenchError("an incremental sync pushed \(summary.pushed) and received \(summary.pulled), expected 1 and 0")
        }
        return seconds * 1_000
    }

    func close() async {
        await server.stop()
        await database.close()
        try? FileManager.default.removeItem(at: folder)
    }
}

/// Both stores are built first; then their timed syncs alternate (small, large, small, …), so a change in
/// machine speed during the run hits both sides of the ratio alike. Two warm-up rounds are not counted.
struct IncrementalSyncBench {
    let small: Int
    let large: Int
    let reps: Int
    let root: URL

    func run() async throws -> (small: IncrementalSyncResult, large: IncrementalSyncResult) {
        let a = try await IncrementalStore.make(records: small, root: root)
        let b: IncrementalStore
        do { b = try await IncrementalStore.make(records: large, root: root) } catch {
            await a.close()
            throw error
        }
        do {
            var samples: ([Double], [Double]) = ([], [])
            for round in 0..<(reps + 2) {
                let ta = try await a.changeAndSync(round: round)
                let tb = try await b.changeAndSync(round: round)
                // The first two rounds warm the caches and are not counted.
                if round >= 2 {
                    samples.0.append(ta)
                    samples.1.append(tb)
                }
            }
            await a.close()
            await b.close()
            let result = (IncrementalSyncResult(records: small, samplesMs: samples.0), IncrementalSyncResult(records: large, samplesMs: samples.1))
            for r in [result.0, result.1] {
                Progress.say(
                    "incremental: \(r.records) records: median \(fmt(r.medianMs, 2)) ms over \(r.samplesMs.count) syncs "
                        + "(min \(fmt(r.samplesMs.min() ?? .nan, 2)), max \(fmt(r.samplesMs.max() ?? .nan, 2)))"
                )
            }
            return result
        } catch {
            await a.close()
            await b.close()
            throw error
        }
    }
}
