import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultServer
import VaultTestSupport

@testable import VaultClient

/// Random sequences of edits, outcome readings, syncs, interrupted syncs, clock jumps and share changes on
/// 3-5 devices of one patient and a doctor. At the end (everyone syncs twice) every device holds the same
/// state, the last write of each activity wins, every outcome value recorded anywhere is there once, and the
/// doctor sees exactly the shared category (Docs/design.md §3, §5).
///
/// A failing sequence prints its seed; `CAREVAULT_SEED=N` reruns exactly that sequence. By default a few short
/// sequences run; `CAREVAULT_CONVERGENCE_RUNS` and `CAREVAULT_CONVERGENCE_STEPS` make the run longer.
@Suite("Convergence: random histories on many devices end in one state")
struct ConvergenceTests {
    static let env = ProcessInfo.processInfo.environment
    static let runs = env["CAREVAULT_CONVERGENCE_RUNS"].flatMap { Int($0) } ?? 4
    static let steps = env["CAREVAULT_CONVERGENCE_STEPS"].flatMap { Int($0) } ?? 40
    /// Activity ids and their fixed categories: "interventions" is the one shared with the doctor.
    static let activities = [("a0", "interventions"), ("a1", "interventions"), ("a2", "interventions"), ("a3", "assessments"), ("a4", "assessments")]
    static let hour: Int64 = 3_600_000

    /// The seeds to run: the one in CAREVAULT_SEED, or `runs` fresh ones.
    static func seeds() -> [UInt64] {
        if let fixed = env["CAREVAULT_SEED"].flatMap({ UInt64($0) }) { return [fixed] }
        var base = SeededGenerator(seed: UInt64.random(in: 1...UInt64.max))
        return (0..<runs).map { _ in base.next() }
    }

    @Test(arguments: Backend.allCases)
    func randomHistoriesConverge(backend: Backend) async throws {
        for seed in Self.seeds() {
            print("convergence[\(backend)]: seed \(seed) (replay with CAREVAULT_SEED=\(seed))")
            try await ConvergenceWorld.run(backend) { world in
                var run = ConvergenceRun(world: world, seed: seed)
                do {
                    try await run.play(steps: Self.steps)
                } catch {
                    Issue.record("seed \(seed) failed: \(error)\nlast steps:\n\(run.log.suffix(15).joined(separator: "\n"))")
                }
            }
        }
    }
}

/// One random sequence: its generator, devices, doctor, model of what was written, and a log of steps.
struct ConvergenceRun {
    let world: ConvergenceWorld
    let seed: UInt64
    var rng: SeededGenerator
    var devices: [PatientDevice] = []
    var doctor: DoctorReader?
    var model = ConvergenceModel()
    var log: [String] = []
    var titles = 0
    /// Syncs that a cancellation or a failing link cut off.
    var cutOff = 0

    init(world: ConvergenceWorld, seed: UInt64) {
        self.world = world
        self.seed = seed
        rng = SeededGenerator(seed: seed)
    }

    mutating func play(steps: Int) async throws {
        let password = "patient-password"
        let first = try world.world.device("setup")
        _ = try await first.accounts.register(username: "pat", password: password, role: .patient)
        try await world.world.approveAll()
        for i in 0..<Int.random(in: 3...5, using: &rng) {
            devices.append(try await world.patientDevice("device-\(i)", username: "pat", password: password))
        }
        doctor = try await world.world.doctor("doc", on: try world.world.device("doctor"))
        log.append("\(devices.count) devices")
        try await toggleShare(devices[0])

        for step in 0..<steps {
            let d = devices.randomElement(using: &rng)!
            let roll = Int.random(in: 0..<100, using: &rng)
            switch roll {
            case 0..<25: try await writeActivity(d)
            case 25..<33: try await removeActivity(d)
            case 33..<58: try await recordOutcome(d)
            case 58..<72: try await sync(d)
            case 72..<80: try await cancelledSync(d)
            case 80..<88: try await failingSync(d)
            case 88..<94: jumpClock(d)
            case 94..<97: try await toggleShare(d)
            default: try await doctorLooks()
            }
            log[log.count - 1] = "\(step): " + log[log.count - 1]
        }
        try await finish()
    }

    // MARK: Steps

    mutating func writeActivity(_ d: PatientDevice) async throws {
        let (id, category) = ConvergenceTests.activities.randomElement(using: &rng)!
        titles += 1
        let title = "\(id) v\(titles) by \(d.name)"
        var activity = try Sample.activity(id, title: title, category: category)
        if try await d.vault.activity(id: id) != nil {
            log.append("\(d.name) updates \(id) to '\(title)'")
            activity.title = title
            try await d.vault.updateActivity(activity)
        } else {
            log.append("\(d.name) adds \(id) as '\(title)'")
            try await d.vault.addActivity(activity)
        }
        try await model.noteActivity(id, title: title, on: d)
    }

    mutating func removeActivity(_ d: PatientDevice) async throws {
        guard let live = try await d.vault.activities().randomElement(using: &rng) else { return try await writeActivity(d) }
        log.append("\(d.name) removes \(live.id)")
        try await d.vault.removeActivity(id: live.id)
        try await model.noteActivity(live.id, title: nil, on: d)
    }

    mutating func recordOutcome(_ d: PatientDevice) async throws {
        guard let live = try await d.vault.activities().randomElement(using: &rng) else { return try await writeActivity(d) }
        let occurrence = Int.random(in: 0..<3, using: &rng)
        let value = Sample.value(Double(Int.random(in: 0..<10_000, using: &rng)), at: Date().unixMillis)
        log.append("\(d.name) records \(value.id.prefix(8)) for \(live.id)#\(occurrence)")
        try await d.vault.recordOutcome(activityID: live.id, occurrence: occurrence, value: value)
        model.values[.init(activity: live.id, occurrence: occurrence), default: []].insert(value.id)
    }

    mutating func sync(_ d: PatientDevice) async throws {
        log.append("\(d.name) syncs")
        let summary = try await d.vault.sync()
        #expect(summary.rejected.isEmpty, "seed \(seed): the server refused versions: \(summary.rejected)")
    }

    /// A sync cancelled after a random short while: it may finish, or end as an interruption, never otherwise.
    mutating func cancelledSync(_ d: PatientDevice) async throws {
        let delay = Int.random(in: 0...20, using: &rng)
        log.append("\(d.name) syncs, cancelled after \(delay) ms")
        let vault = d.vault
        let task = Task { try await vault.sync() }
        try await Task.sleep(for: .milliseconds(delay))
        task.cancel()
        if case let .failure(error) = await task.result {
            cutOff += 1
            if !isInterruption(error) { Issue.record("seed \(seed): a cancelled sync ended with \(error)") }
        }
    }

    /// A sync through a link that starts failing after a few requests, losing requests or their answers.
    mutating func failingSync(_ d: PatientDevice) async throws {
        let skip = Int.random(in: 0...6, using: &rng)
        let fail = Int.random(in: 1...4, using: &rng)
        let mode = FaultInjector.Mode.allCases.randomElement(using: &rng)!
        log.append("\(d.name) syncs; \(fail) requests fail (\(mode)) after \(skip)")
        world.faults.arm(skip: skip, fail: fail, mode: mode)
        defer { world.faults.disarm() }
        do { _ = try await d.vault.sync() } catch  where isInterruption(error) { cutOff += 1 }
    }

    /// Moves a device's clock by up to two hours either way, staying within six hours of real time (the
    /// server accepts twelve ahead), and the server's by up to a minute (admin signatures allow five).
    mutating func jumpClock(_ d: PatientDevice) {
        var jump = Int64.random(in: -2 * ConvergenceTests.hour...2 * ConvergenceTests.hour, using: &rng)
        if abs(d.offset + jump) > 6 * ConvergenceTests.hour { jump = -jump }
        d.clock.advance(by: jump)
        let server = Int64.random(in: -30_000...30_000, using: &rng)
        world.serverClock.advance(by: server)
        log.append("\(d.name) clock moves \(jump / 60_000) min (now \(d.offset / 60_000) min off); server \(server / 1_000) s")
    }

    /// Revokes the doctor's share of interventions (a new key epoch), or grants it again and has it approved.
    mutating func toggleShare(_ d: PatientDevice) async throws {
        if model.shareActive {
            log.append("\(d.name) revokes the share")
            _ = try await d.vault.revoke(doctor: "doc", category: "interventions")
        } else {
            log.append("\(d.name) grants the share")
            _ = try await d.vault.grant(doctor: "doc", category: "interventions")
            try await world.world.approveAll()
        }
        model.shareActive.toggle()
    }

    /// The doctor reads mid-way: only what the share allows, and never an integrity failure.
    mutating func doctorLooks() async throws {
        log.append("the doctor looks")
        guard let doctor else { return }
        do {
            let view = try await doctor.view(patient: "pat")
            #expect(model.shareActive && view.categories == ["interventions"], "seed \(seed): doctor saw \(view.categories)")
        } catch ClientError.notPermitted {
            #expect(!model.shareActive, "seed \(seed): an active share was refused")
        }
    }

    // MARK: The end state

    mutating func finish() async throws {
        log.append("everyone syncs twice")
        for _ in 0..<2 {
            for d in devices { try await sync(d) }
        }
        let reference = devices[0].vault
        let activities = try await reference.activities()
        let outcomes = try await reference.outcomes()
        for d in devices {
            #expect(try await d.vault.pendingCount() == 0, "seed \(seed): \(d.name) still has unsent versions")
            #expect(try await d.vault.activities() == activities, "seed \(seed): \(d.name)'s activities differ")
            #expect(try await d.vault.outcomes() == outcomes, "seed \(seed): \(d.name)'s outcomes differ")
        }
        // Last writer wins per activity; no other write survives, no removed activity comes back.
        let expected = model.expectedActivities
        let held = Dictionary(uniqueKeysWithValues: activities.map { ($0.id, $0.title) })
        for (id, title) in expected.sorted(by: { $0.key < $1.key }) {
            #expect(held[id] == title, "seed \(seed): \(id) should be \(title ?? "removed"), is \(held[id] ?? "removed")")
        }
        #expect(Set(held.keys).isSubset(of: Set(expected.keys)), "seed \(seed): an activity nobody wrote")
        // Every value recorded on any device is there, once.
        let byKey = Dictionary(grouping: outcomes) { ConvergenceModel.OutcomeKey(activity: $0.activityID, occurrence: $0.occurrence) }
        #expect(byKey.values.allSatisfy { $0.count == 1 }, "seed \(seed): an outcome appears twice")
        #expect(Set(byKey.keys) == Set(model.values.keys), "seed \(seed): outcomes \(byKey.keys.sorted()) vs recorded \(model.values.keys.sorted())")
        for (key, ids) in model.values {
            let values = byKey[key]?.first?.liveValues.map(\.id) ?? []
            #expect(values.count == Set(values).count && Set(values) == ids, "seed \(seed): \(key) holds \(values.count) of \(ids.count) values")
        }
        // The server holds each record once.
        let owner = reference.account.profile.userID
        let heads = try await world.world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100_000)
        #expect(heads.count == expected.count + model.values.count, "seed \(seed): \(heads.count) records on the server")
        try await checkDoctor(activities: activities, outcomes: outcomes)
        print(
            "convergence: seed \(seed): \(devices.count) devices, \(model.activityWrites.values.map(\.count).reduce(0, +)) activity writes, "
                + "\(model.values.values.map(\.count).reduce(0, +)) values, \(cutOff) syncs cut off; end: \(activities.count) activities, "
                + "\(outcomes.count) outcomes, share \(model.shareActive ? "active" : "revoked")"
        )
    }

    /// The doctor sees exactly the shared category while the share is active, and nothing once it is revoked.
    func checkDoctor(activities: [Activity], outcomes: [Outcome]) async throws {
        guard let doctor else { return }
        let listed = try await doctor.patients().patients.map(\.username)
        guard model.shareActive else {
            #expect(listed.isEmpty, "seed \(seed): a revoked share still lists the patient")
            await #expect(throws: ClientError.self, "seed \(seed)") { _ = try await doctor.view(patient: "pat") }
            return
        }
        #expect(listed == ["pat"], "seed \(seed)")
        let view = try await doctor.view(patient: "pat")
        let shared = Set(ConvergenceTests.activities.filter { $0.1 == "interventions" }.map(\.0))
        #expect(view.categories == ["interventions"], "seed \(seed)")
        #expect(view.unreadable == 0, "seed \(seed): the current grant cannot read \(view.unreadable) records")
        #expect(view.activities == activities.filter { shared.contains($0.id) }, "seed \(seed): the doctor's activities differ")
        #expect(view.outcomes == outcomes.filter { shared.contains($0.activityID) }, "seed \(seed): the doctor's outcomes differ")
    }
}
