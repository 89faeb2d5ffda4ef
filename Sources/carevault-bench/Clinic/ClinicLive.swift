import Foundation
import NIOConcurrencyHelpers
import VaultClient
import VaultCore

/// The watching doctors: each runs what `carevault-doctor watch` runs (the event stream, and
/// `DoctorWatch` pulling, verifying and storing what changed), in this process. A change a patient
/// pushed is timed from the moment their sync returned to the moment a watching doctor's pull applied it.
final class ClinicLive: Sendable {
    private struct Pushed {
        var at: ContinuousClock.Instant
        var watchers: [Int]
    }

    private let pushes = NIOLockedValueBox([String: Pushed]())
    private let applied = NIOLockedValueBox([String: ContinuousClock.Instant]())
    private let tasks = NIOLockedValueBox([Task<Void, Never>]())

    /// A change pushed (its sync returned at `at`) that `watchers` should see.
    func pushed(_ recordID: String, at: ContinuousClock.Instant, watchers: [Int]) {
        guard !watchers.isEmpty else { return }
        pushes.withLockedValue { $0[recordID] = Pushed(at: at, watchers: watchers) }
    }

    private func key(_ doctor: Int, _ recordID: String) -> String { "\(doctor)/\(recordID)" }

    /// Starts every watcher; returns once each has read its patients the first time (or after two minutes).
    func start(_ doctors: [ClinicDoctor]) async throws {
        let ready = NIOLockedValueBox(Set<Int>())
        let watching = doctors.filter(\.watcher)
        for d in watching {
            let task = Task { await self.watch(d) { _ = ready.withLockedValue { $0.insert(d.index) } } }
            tasks.withLockedValue { $0.append(task) }
        }
        let started = ContinuousClock.now
        while ready.withLockedValue({ $0.count }) < watching.count {
            guard ContinuousClock.now < started + .seconds(120) else {
                let n = ready.withLockedValue { $0.count }
                throw BenchError("only \(n) of the \(watching.count) watching doctors read their patients within 2 minutes")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        Progress.say("clinic: the \(watching.count) watching doctors read their patients in \(fmt(Measure.since(started), 1)) s")
    }

    private func watch(_ d: ClinicDoctor, ready: @escaping @Sendable () -> Void) async {
        let watch = DoctorWatch(reader: d.reader, patient: nil)
        let report: @Sendable (AppliedChange) -> Void = { change in
            let now = ContinuousClock.now
            self.applied.withLockedValue { a in
                let k = self.key(d.index, change.recordID)
                if a[k] == nil { a[k] = now }
            }
        }
        while !Task.isCancelled {
            do {
                for try await update in try d.reader.account.events(d.transport, policy: Self.policy(d)).updates() {
                    if Task.isCancelled { return }
                    switch update {
                    case .ready, .resync:
                        _ = try? await watch.refreshAll(report: report)
                        ready()
                    case let .share(_, _, patient):
                        _ = try? await watch.refreshShares(of: patient, report: report)
                        ready()
                    case let .change(owner, _):
                        _ = try? await watch.refresh(owner: owner, report: report)
                    case .account:
                        ready()
                        return
                    }
                }
            } catch {
                try? await Task.sleep(for: .milliseconds(500))
            }
        }
    }

    /// Each watcher's stream in a connection pool of its own, as on its own machine. The SDK keeps one pool
    /// per pair of timeouts, 8 connections per host, and a stream holds its connection: on one instance,
    /// the 9th and 10th watchers' streams waited for a connection that never came free (the SQLite
    /// clinic's watchers did not all start). The silence limit, 1 ms apart per watcher, keys the pools.
    static func policy(_ d: ClinicDoctor) -> EventStream.Policy {
        var policy = EventStream.Policy()
        policy.silence += .milliseconds(d.index)
        return policy
    }

    func stop() {
        for t in tasks.withLockedValue({ $0 }) { t.cancel() }
    }

    /// Each change pushed while watched, against the first time each watching doctor applied it: the
    /// samples (due = push returned, end = applied), and how many never arrived.
    func collect(into samples: ClinicSamples) -> (delivered: Int, missed: Int) {
        let pushes = self.pushes.withLockedValue { $0 }
        let applied = self.applied.withLockedValue { $0 }
        var delivered = 0
        var missed = 0
        for (record, p) in pushes {
            for w in p.watchers {
                if let at = applied[key(w, record)] {
                    delivered += 1
                    let due = Measure.seconds(p.at - samples.start)
                    samples.add(.live, due: due, end: due + max(0, Measure.seconds(at - p.at)), ok: true)
                } else {
                    missed += 1
                }
            }
        }
        return (delivered, missed)
    }
}
