import ClinicAudit
import Foundation
import VaultCrypto

/// What one clinic run measured (Docs/benchmarks.md, "The clinic").
struct ClinicResult: Sendable {
    var backend: BackendKind
    var instances: Int
    var plan: ClinicPlan
    var records = 0
    var loadSeconds = 0.0
    var probeSmall: (sync: Double, refresh: Double)?
    var probeLarge: (sync: Double, refresh: Double)?
    /// The large probe again at once, without a checkpoint before it: a diagnostic, not the growth figure.
    var probeLargeAgain: (sync: Double, refresh: Double)?
    /// Per probe (small, large, large again): where its time went (`ClinicProbeDiagnostics`).
    var probeDiagnostics: [(String, [String])] = []
    var operations: [OperationSummary] = []
    var windows: [ClinicSamples.Window] = []
    var failures: [String: Int] = [:]
    var liveMissed = 0
    var audit = ClinicFinalAudit.Outcome()
    var serverRSS: [Double] = []
    var databaseMiB = 0.0
    var slowStatements: Int?
    var topStatements: [ClinicDatabase.Statement] = []
    /// Server-side request times by route and CPU seconds by process during the workload.
    var serverTimes: [String] = []

    var growthSync: Double? { probeSmall.flatMap { s in probeLarge.map { $0.sync / s.sync } } }
    var growthRefresh: Double? { probeSmall.flatMap { s in probeLarge.map { $0.refresh / s.refresh } } }
    var growth: Double? { growthSync.flatMap { a in growthRefresh.map { max(a, $0) } } }
    var errors: Int { operations.filter { $0.operation != .live }.map(\.errors).reduce(0, +) }
    func op(_ o: ClinicOperation) -> OperationSummary? { operations.first { $0.operation == o } }
}

/// `carevault-bench --clinic`: builds the clinic, measures the growth probe at 10,000 and at all records,
/// runs the mixed workload with its faults, and audits the result.
struct ClinicBench {
    let plan: ClinicPlan
    let backend: BackendKind
    let root: URL

    func run() async throws -> ClinicResult {
        try plan.validate()
        let folder = root.appendingPathComponent("clinic-\(backend.rawValue)-\(shortID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var postgres: ClinicPostgres?
        let database: String
        switch backend {
        case .sqlite: database = "sqlite:" + folder.appendingPathComponent("carevault.sqlite").path
        case .postgres:
            let pg = try await ClinicPostgres.start(maxConnections: 400)
            postgres = pg
            database = pg.url
        }
        let admin = SigningKeyPair.generate()
        let instances: ClinicInstances
        do {
            instances = try await ClinicInstances.start(
                count: backend == .postgres ? 2 : 1,
                database: database,
                adminKey: admin.publicKey,
                folder: folder
            )
        } catch {
            await postgres?.destroy()
            throw error
        }
        do {
            let result = try await measure(instances: instances, postgres: postgres, admin: admin, folder: folder)
            await instances.stop()
            await postgres?.destroy()
            try? FileManager.default.removeItem(at: folder)
            return result
        } catch {
            await instances.stop()
            await postgres?.destroy()
            try? FileManager.default.removeItem(at: folder)
            throw error
        }
    }

    private func measure(instances: ClinicInstances, postgres: ClinicPostgres?, admin: SigningKeyPair, folder: URL) async throws -> ClinicResult {
        var result = ClinicResult(backend: backend, instances: instances.count, plan: plan)
        let label = "\(backend.label), \(instances.count) instance\(instances.count == 1 ? "" : "s")"
        Progress.say("clinic (\(label)): \(plan.patients) patients, \(plan.doctors) doctors, \(plan.recordsPerPatient) records each")
        let started = ContinuousClock.now
        let build = try await ClinicBuild.make(plan: plan, admin: admin, urls: instances.urls, root: folder)
        // The probe's own bookkeeping (its syncs are acknowledged like any other; its times are its own).
        let probing = ClinicSamples(start: .now)
        let workload = ClinicWorkload(build: build, instances: instances, postgres: postgres, samples: probing, live: ClinicLive())

        try await build.load(0..<plan.probePatients)
        let small = try await probe(workload, "\(plan.probePatients * plan.recordsPerPatient) records stored")
        result.probeSmall = small.medians
        result.probeDiagnostics.append(("small", small.diagnostics))
        let chunk = 50
        for start in stride(from: plan.probePatients, to: plan.patients, by: chunk) {
            let (_, s) = try await Measure.timeAsync { try await build.load(start..<min(start + chunk, plan.patients)) }
            let done = min(start + chunk, plan.patients)
            Progress.say(
                "clinic: \(done) of \(plan.patients) patients stored (\(done * plan.recordsPerPatient) records); last \(min(chunk, plan.patients - start)) in \(fmt(s, 1)) s, "
                    + "elapsed \(fmt(Measure.since(started), 0)) s"
            )
        }
        result.records = plan.patients * plan.recordsPerPatient
        result.loadSeconds = Measure.since(started)
        let large = try await probe(workload, "\(result.records) records stored")
        result.probeLarge = large.medians
        result.probeDiagnostics.append(("large", large.diagnostics))
        let again = try await probe(workload, "\(result.records) records stored, again without a checkpoint", settle: false)
        result.probeLargeAgain = again.medians
        result.probeDiagnostics.append(("large_again", again.diagnostics))

        Progress.say("clinic: \(plan.watchers) doctors start watching")
        let live = ClinicLive()
        try await live.start(build.doctors)
        let times = ClinicServerTimes(instances: instances)
        var timed = ClinicWorkload(build: build, instances: instances, postgres: postgres, samples: ClinicSamples(start: .now), live: live)
        timed.times = times
        // PostgreSQL's statement times from here on are the workload's, not the load's.
        if let postgres { try? await ClinicDatabase.resetStatements(postgres.url) }
        await times.begin()
        try await timed.run()
        result.serverTimes = await times.finish(seconds: Measure.since(timed.samples.start))
        for line in result.serverTimes { Progress.say("clinic: \(line)") }
        if let postgres { result.topStatements = (try? await ClinicDatabase.topStatements(postgres.url)) ?? [] }
        // Changes pushed in the last moments get a few seconds to reach the watching doctors.
        try await Task.sleep(for: .seconds(3))
        live.stop()
        let delivered = live.collect(into: timed.samples)
        result.liveMissed = delivered.missed
        let seconds = plan.seconds
        result.operations = ClinicOperation.allCases.map { timed.samples.summary($0, seconds: seconds) }
        result.windows = timed.samples.allWindows
        result.failures = timed.samples.allFailures
        result.serverRSS = instances.peakMiB
        result.audit = try await ClinicFinalAudit(build: build, instances: instances).run()
        result.databaseMiB = try await ClinicDatabase.sizeMiB(instances.database)
        if let postgres {
            result.slowStatements = Self.slowStatements(postgres.logFile)
            if result.topStatements.isEmpty {
                Progress.say("clinic: note: pg_stat_statements could not be read")
            } else {
                Progress.say("clinic: PostgreSQL's time by statement during the workload (pg_stat_statements), largest first:")
                for s in result.topStatements {
                    Progress.say("clinic:   \(fmt(s.totalMs / 1_000, 1)) s in \(s.calls) calls (mean \(fmt(s.meanMs, 2)) ms): \(s.query)")
                }
            }
        }
        return result
    }

    /// The growth probe: `plan.probeSamples` small syncs and doctors' incremental refreshes, one at a time on
    /// an otherwise idle clinic, after the database settled (`settle`); medians in ms, and where the time went.
    private func probe(
        _ workload: ClinicWorkload,
        _ what: String,
        settle: Bool = true
    ) async throws -> (medians: (sync: Double, refresh: Double), diagnostics: [String]) {
        if settle {
            let (_, settled) = try await Measure.timeAsync { try await ClinicDatabase.settle(workload.instances.database) }
            Progress.say("clinic: the database settled in \(fmt(settled, 1)) s (statistics, checkpoint) before the probe")
        }
        let diagnostics = ClinicProbeDiagnostics(instances: workload.instances, postgres: workload.postgres)
        let times = await diagnostics.begin()
        let walBefore = await diagnostics.wal()
        let started = ContinuousClock.now
        var syncs: [Double] = []
        var refreshes: [Double] = []
        let build = workload.build
        for k in 0..<(plan.probeSamples + 2) {
            let p = build.patient(k % plan.probePatients)
            let (_, s) = try await Measure.timeAsync { try await workload.sync(p) }
            let doctor = p.state.withLockedValue { $0.shares }.map(\.doctor).min()!
            let (_, r) = try await Measure.timeAsync { _ = try await build.doctors[doctor].reader.view(patient: p.name) }
            if k >= 2 {
                syncs.append(s * 1_000)
                refreshes.append(r * 1_000)
            }
        }
        let lines = await diagnostics.finish(times, walBefore: walBefore, syncs: plan.probeSamples + 2, seconds: Measure.since(started))
        let out = (Measure.median(syncs), Measure.median(refreshes))
        Progress.say("clinic: probe with \(what): median sync \(fmt(out.0, 1)) ms, median refresh \(fmt(out.1, 1)) ms")
        for line in lines { Progress.say("clinic:   \(line)") }
        return (out, lines)
    }

    /// Statements PostgreSQL logged as slower than 250 ms.
    static func slowStatements(_ log: String) -> Int? {
        guard let text = try? String(contentsOfFile: log, encoding: .utf8) else { return nil }
        return text.split(separator: "\n").filter { $0.contains("duration:") }.count
    }
}
