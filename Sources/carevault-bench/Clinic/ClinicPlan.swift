import Foundation

/// The clinic simulation's size and workload (Docs/benchmarks.md, "The clinic"). The defaults are the
/// issue's clinic: 1,000 patients, 50 doctors, 1,000 records each.
struct ClinicPlan: Sendable {
    var patients = 1_000
    var doctors = 50
    /// Records per patient: one activity per category, the rest outcomes.
    var recordsPerPatient = 1_000
    /// The mixed workload's length.
    var seconds = 240.0
    /// Open-loop arrivals per second, over the whole clinic: a patient records an outcome and syncs; a
    /// doctor opens a patient (the verified view, refreshed incrementally).
    var syncsPerSecond = 8.0
    var refreshesPerSecond = 4.0
    /// Doctors who watch their patients live (the rest refresh); their figure is `clinic_live_p99_ms`.
    var watchers = 10
    /// Every so often a patient asks for a new share (approved by the admin) and a new patient registers.
    var shareEvery = 10.0
    var registrationEvery = 15.0
    /// The growth probe: this many patients' worth of records (10 x 1,000 = 10,000) is stored first and the
    /// probe's syncs and refreshes are timed; the same probe runs again once the whole clinic is stored.
    var probePatients = 10
    var probeSamples = 101
    /// Kill one instance (SIGKILL, started again after a second) at a third of the workload; restart
    /// PostgreSQL at two thirds.
    var faults = true
    /// How many patients load at once.
    var loadConcurrency = 3
    var seed: UInt64 = 20_261_127

    static let categories = ["interventions", "assessments", "symptoms"]

    /// After a fault the window stays open this long past recovery (latencies there are reported apart).
    static let faultTail = 5.0

    func validate() throws {
        guard patients >= probePatients, probePatients >= 1 else { throw BenchError("the clinic needs at least \(probePatients) patients") }
        guard doctors >= 1, watchers >= 0, watchers < doctors || doctors == 1 else {
            throw BenchError("the clinic needs at least one doctor who refreshes (watchers < doctors)")
        }
        guard recordsPerPatient > Self.categories.count else { throw BenchError("each patient needs more than \(Self.categories.count) records") }
        guard seconds >= 10 else { throw BenchError("the workload must run at least 10 seconds") }
        guard (1...10_000).contains(probeSamples) else { throw BenchError("the growth probe takes 1 to 10,000 samples") }
    }
}

/// A small seeded generator (SplitMix64): the same seed builds the same clinic.
struct SeededRandom: RandomNumberGenerator, Sendable {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Arrival offsets (seconds) of a Poisson process of `rate` per second over `seconds`.
    mutating func arrivals(rate: Double, seconds: Double) -> [Double] {
        guard rate > 0 else { return [] }
        var t = 0.0
        var out: [Double] = []
        while true {
            let u = Double.random(in: Double.ulpOfOne..<1, using: &self)
            t += -log(u) / rate
            if t >= seconds { return out }
            out.append(t)
        }
    }
}
