import Foundation
import NIOConcurrencyHelpers
import VaultClient
import VaultCore

/// The mixed workload of a clinic's day, open-loop: arrivals come at their times whether or not the
/// server kept up, so a slow server shows as latency (each operation is timed from its arrival).
struct ClinicWorkload {
    let build: ClinicBuild
    let instances: ClinicInstances
    let postgres: ClinicPostgres?
    let samples: ClinicSamples
    let live: ClinicLive
    /// Told before each fault, so the server-side figures span it.
    var times: ClinicServerTimes?

    /// Runs the workload for `plan.seconds` with the faults, then waits for what is still running.
    func run() async throws {
        let plan = build.plan
        var rng = SeededRandom(seed: plan.seed ^ 0x5EED)
        let syncs = rng.arrivals(rate: plan.syncsPerSecond, seconds: plan.seconds)
        let refreshes = rng.arrivals(rate: plan.refreshesPerSecond, seconds: plan.seconds)
        let shares = stride(from: plan.shareEvery, to: plan.seconds, by: plan.shareEvery).map { $0 }
        let registrations = stride(from: plan.registrationEvery, to: plan.seconds, by: plan.registrationEvery).map { $0 }
        Progress.say(
            "clinic: workload of \(Int(plan.seconds)) s: \(syncs.count) syncs, \(refreshes.count) refreshes, \(shares.count) new shares, "
                + "\(registrations.count) registrations, \(build.doctors.filter(\.watcher).count) doctors watching"
        )
        let picks = NIOLockedValueBox(SeededRandom(seed: plan.seed ^ 0xB0B))
        let registered = NIOLockedValueBox(0)
        await withDiscardingTaskGroup { group in
            group.addTask { await self.watchMemory(until: plan.seconds) }
            if plan.faults { group.addTask { await self.faults(plan) } }
            for (times, op) in [(syncs, ClinicOperation.sync), (refreshes, .refresh), (shares, .share), (registrations, .register)] {
                group.addTask {
                    await withDiscardingTaskGroup { arrivals in
                        for due in times {
                            let wait = due - samples.now()
                            if wait > 0 { try? await Task.sleep(for: .seconds(wait)) }
                            let seed = picks.withLockedValue { $0.next() }
                            arrivals.addTask {
                                let ok: Bool
                                do {
                                    ok = try await self.perform(op, seed: seed, registered: registered)
                                } catch {
                                    samples.failed(op, error)
                                    samples.add(op, due: due, end: samples.now(), ok: false)
                                    return
                                }
                                if ok { samples.add(op, due: due, end: samples.now(), ok: true) }
                            }
                        }
                    }
                }
            }
        }
    }

    /// One operation; false when there was nobody free to do it (not timed).
    func perform(_ op: ClinicOperation, seed: UInt64, registered: NIOLockedValueBox<Int>) async throws -> Bool {
        var rng = SeededRandom(seed: seed)
        switch op {
        case .sync:
            guard let p = try await claimPatient(&rng) else { return false }
            defer { p.release() }
            try await sync(p)
        case .refresh:
            let refreshing = build.doctors.filter { !$0.watcher }
            guard let d = refreshing.randomElement(using: &rng) else { return false }
            try await d.claimWaiting()
            defer { d.release() }
            let mine = d.patients.withLockedValue { $0 }
            guard let i = mine.randomElement(using: &rng) else { return false }
            let view = try await d.reader.view(patient: build.patient(i).name)
            guard view.quarantined.isEmpty, view.complete else {
                throw BenchError(
                    "\(d.name)'s view of \(build.patient(i).name) is not verified: \(view.quarantineMessage ?? view.completenessMessage ?? "")"
                )
            }
        case .share:
            guard let p = try await claimPatient(&rng) else { return false }
            defer { p.release() }
            let held = p.state.withLockedValue { $0.shares }
            let candidates = build.doctors.indices.flatMap { d in ClinicPlan.categories.map { ClinicShare(doctor: d, category: $0) } }.filter {
                !held.contains($0)
            }
            guard let s = candidates.randomElement(using: &rng) else { return false }
            _ = try await p.vault.grant(doctor: build.doctors[s.doctor].name, category: s.category)
            try await build.approveAll()
            let summary = try await p.vault.sync()
            guard summary.rejected.isEmpty else { throw BenchError("the sync after a new share rejected \(summary.rejected)") }
            p.state.withLockedValue { _ = $0.shares.insert(s) }
            build.doctors[s.doctor].patients.withLockedValue { if !$0.contains(p.index) { $0.append(p.index) } }
        case .register:
            let n = registered.withLockedValue { v in
                v += 1
                return v
            }
            let name = String(format: "new-%04d", n)
            let m = try build.manager(name, instance: n % build.urls.count, spread: n)
            _ = try await m.register(username: name, password: ClinicBuild.password, role: .patient)
            try await build.approveAll()
            _ = try await m.login(username: name, password: ClinicBuild.password)
        case .live:
            return false
        }
        return true
    }

    /// A random patient, claimed once their device is free (an arrival is never dropped for being busy:
    /// its wait counts in its latency).
    func claimPatient(_ rng: inout SeededRandom) async throws -> ClinicPatient? {
        guard let p = build.patients.withLockedValue({ $0 }).randomElement(using: &rng) else { return nil }
        try await p.claimWaiting()
        return p
    }

    /// A patient records an outcome of one of their activities and syncs: the server acknowledged it when
    /// the sync returns without error or rejection.
    func sync(_ p: ClinicPatient) async throws {
        let category = ClinicPlan.categories[Int.random(in: 0..<ClinicPlan.categories.count)]
        let activity = ClinicPatient.activityID(category)
        let occurrence = p.state.withLockedValue { s in
            let o = s.next[activity, default: 0]
            s.next[activity] = o + 1
            return o
        }
        let value = OutcomeValue(value: .number(Double(occurrence % 10)), units: "score", createdAt: Date())
        _ = try await p.vault.recordOutcome(activityID: activity, occurrence: occurrence, value: value, note: nil)
        let id = p.recordID(activity: activity, occurrence: occurrence)
        p.state.withLockedValue { $0.pending.append(id) }
        let summary = try await p.vault.sync()
        guard summary.rejected.isEmpty else { throw BenchError("a sync rejected \(summary.rejected)") }
        p.state.withLockedValue { s in
            s.acked += s.pending
            s.pending = []
        }
        let watchers = p.state.withLockedValue { $0.shares }.filter { $0.category == category && build.doctors[$0.doctor].watcher }.map(\.doctor)
        live.pushed(id, at: .now, watchers: watchers)
    }

    /// The faults: one instance killed and started again a second later at a third of the run;
    /// PostgreSQL restarted at two thirds. Each window lasts until recovery plus `ClinicPlan.faultTail`.
    func faults(_ plan: ClinicPlan) async {
        try? await Task.sleep(for: .seconds(plan.seconds / 3 - samples.now()))
        await times?.beforeKill()
        let killed = samples.now()
        do {
            try await instances.crashAndRestart(0, after: 1)
            let back = samples.now()
            samples.window("instance 0 killed (SIGKILL) and restarted", start: killed, end: back + ClinicPlan.faultTail)
            Progress.say("clinic: instance 0 killed at \(fmt(killed, 1)) s, listening again after \(fmt(back - killed, 2)) s")
        } catch {
            samples.window("instance 0 killed and NOT restarted: \(error)", start: killed, end: plan.seconds)
            Progress.say("clinic: error: instance 0 did not start again: \(error)")
        }
        guard let postgres else { return }
        try? await Task.sleep(for: .seconds(2 * plan.seconds / 3 - samples.now()))
        times?.beforeRestart()
        let stopped = samples.now()
        do {
            try await postgres.restart()
            let back = samples.now()
            samples.window("PostgreSQL restarted", start: stopped, end: back + ClinicPlan.faultTail)
            Progress.say("clinic: PostgreSQL restarted at \(fmt(stopped, 1)) s in \(fmt(back - stopped, 2)) s")
        } catch {
            samples.window("PostgreSQL restart failed: \(error)", start: stopped, end: plan.seconds)
            Progress.say("clinic: error: PostgreSQL restart failed: \(error)")
        }
    }

    func watchMemory(until seconds: Double) async {
        while samples.now() < seconds {
            instances.sample()
            try? await Task.sleep(for: .seconds(1))
        }
    }
}
