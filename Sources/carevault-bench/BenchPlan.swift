/// How much each benchmark does: the full run described in Docs/benchmarks.md, or the reduced `--quick` run (under two
/// minutes after the build on a 2-core machine).
struct BenchPlan: Sendable {
    let quick: Bool

    // §1 envelope seal/open: interleaved reps after one warm-up rep, each rep about this long.
    var cryptoReps: Int { quick ? 9 : 21 }
    var cryptoRepSeconds: Double { quick ? 0.025 : 0.05 }

    // §2, §3 push and pull: 10,000 outcomes; the quick run pushes 1,000 of the 16 KiB ones.
    func pushCount(_ size: RecordSize) -> Int { size == .small || !quick ? 10_000 : 1_000 }

    // §4 incremental sync: 1,000 against 100,000 records (20,000 in the quick run).
    let incrementalSmall = 1_000
    var incrementalLarge: Int { quick ? 20_000 : 100_000 }
    var incrementalReps: Int { quick ? 9 : 21 }

    // §5 load: N clients per level, each level bounded in time and in requests.
    let loadClients = [1, 16, 64]
    var loadSeconds: Double { quick ? 3 : 10 }
    var loadRequestBudget: Int { quick ? 3_000 : 20_000 }

    // §6 login with Argon2id MODERATE.
    let loginReps = 3

    // §7 the doctor's first read of a large share: 100,000 records in both runs (the figure is about that size).
    let doctorMemoryRecords = 100_000

    // §8 live updates: changes pushed one at a time while a doctor watches.
    var liveReps: Int { quick ? 30 : 200 }
    /// Other streams open while the doctor watches (the full run's figure is `live_p99_ms_1000`).
    var liveIdle: Int { quick ? 200 : 1_000 }
}

/// The parts of the benchmark, selectable with `--only` (all by default).
enum BenchSection: String, CaseIterable, Sendable {
    case crypto, push, incremental, load, login, memory, live
}
