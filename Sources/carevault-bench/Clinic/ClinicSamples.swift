import Foundation
import NIOConcurrencyHelpers

/// The workload's operations, as reported.
enum ClinicOperation: String, CaseIterable, Sendable {
    case sync, refresh, live, share, register
}

/// Every timed operation of the workload: when it was due (open-loop: its arrival, not when a client got
/// round to it), when it ended, and whether it succeeded; and the fault windows, so that latencies inside
/// them are reported apart.
final class ClinicSamples: Sendable {
    struct Sample: Sendable {
        var operation: ClinicOperation
        var due: Double
        var end: Double
        var ok: Bool
        var ms: Double { max(0, end - due) * 1_000 }
    }

    struct Window: Sendable {
        var what: String
        var start: Double
        var end: Double
    }

    let start: ContinuousClock.Instant
    private let samples = NIOLockedValueBox([Sample]())
    private let windows = NIOLockedValueBox([Window]())
    private let failures = NIOLockedValueBox([String: Int]())

    init(start: ContinuousClock.Instant) { self.start = start }

    func now() -> Double { Measure.seconds(ContinuousClock.now - start) }

    func add(_ operation: ClinicOperation, due: Double, end: Double, ok: Bool) {
        samples.withLockedValue { $0.append(Sample(operation: operation, due: due, end: end, ok: ok)) }
    }

    /// A failure after the client's retries, by a short description (the report lists the most common).
    func failed(_ operation: ClinicOperation, _ error: any Error) {
        let key = "\(operation.rawValue): \(String(describing: error).prefix(160))"
        failures.withLockedValue { $0[key, default: 0] += 1 }
    }

    func window(_ what: String, start: Double, end: Double) { windows.withLockedValue { $0.append(Window(what: what, start: start, end: end)) } }

    var allWindows: [Window] { windows.withLockedValue { $0 } }
    var allFailures: [String: Int] { failures.withLockedValue { $0 } }

    func inFault(_ s: Sample) -> Bool { allWindows.contains { s.due < $0.end && s.end > $0.start } }

    /// Count, successes, throughput and percentiles of one operation, outside or inside the fault windows.
    func summary(_ operation: ClinicOperation, seconds: Double) -> OperationSummary {
        let mine = samples.withLockedValue { $0.filter { $0.operation == operation } }
        let windows = allWindows
        let inside: (Sample) -> Bool = { s in windows.contains { s.due < $0.end && s.end > $0.start } }
        let outside = mine.filter { $0.ok && !inside($0) }
        let steady = outside.map(\.ms).sorted()
        let faulty = mine.filter { $0.ok && inside($0) }.map(\.ms).sorted()
        return OperationSummary(
            operation: operation,
            count: mine.count,
            ok: mine.filter(\.ok).count,
            perSecond: Double(mine.filter(\.ok).count) / max(seconds, 1e-9),
            steady: Percentiles(steady),
            fault: Percentiles(faulty),
            slowest: outside.sorted { $0.ms > $1.ms }.prefix(5).map { (due: $0.due, ms: $0.ms) }
        )
    }
}

struct Percentiles: Sendable {
    var n: Int
    var p50: Double?
    var p95: Double?
    var p99: Double?
    var max: Double?

    init(_ sorted: [Double]) {
        n = sorted.count
        guard !sorted.isEmpty else { return }
        p50 = Measure.percentile(sorted: sorted, 50)
        p95 = Measure.percentile(sorted: sorted, 95)
        p99 = Measure.percentile(sorted: sorted, 99)
        max = sorted.last
    }
}

struct OperationSummary: Sendable {
    var operation: ClinicOperation
    var count: Int
    var ok: Int
    var perSecond: Double
    var steady: Percentiles
    var fault: Percentiles
    /// The slowest samples outside the fault windows, with when they were due (seconds into the
    /// workload): whether the tail sits just after a window (a fault's effect outlasting it) or anywhere.
    var slowest: [(due: Double, ms: Double)]
    var errors: Int { count - ok }
}
