import Foundation
import VaultCrypto

/// Everything one run measured, rendered as the table for people or as the JSON object described in Docs/benchmarks.md.
struct BenchReport {
    let plan: BenchPlan
    var crypto: [CryptoResult] = []
    /// The state commitment's cost (Docs/envelope-v1.md §3.4), measured with the crypto section.
    var commitment: CommitmentResult?
    var pushPull: [PushPullResult] = []
    var postgresUnavailable: String?
    var incrementalSmall: IncrementalSyncResult?
    var incrementalLarge: IncrementalSyncResult?
    var load: [LoadLevelResult] = []
    var login: LoginResult?
    var doctorMemory: DoctorMemoryResult?
    var live: LiveReport?
    var notes: [String] = []
    var errors: [String] = []
    var elapsedSeconds: Double = 0

    init(plan: BenchPlan) { self.plan = plan }

    mutating func fail(_ section: String, _ error: any Error) {
        let line = "\(section): \(error)"
        errors.append(line)
        Progress.say("error: " + line)
    }

    // MARK: Figures

    func crypto(_ size: RecordSize) -> CryptoResult? { crypto.first { $0.size == size } }
    func pp(_ backend: BackendKind, _ size: RecordSize) -> PushPullResult? { pushPull.first { $0.backend == backend && $0.size == size } }

    var sealRatio: Double? { crypto.count == RecordSize.allCases.count ? crypto.map(\.sealRatio).min() : nil }
    var openRatio: Double? { crypto.count == RecordSize.allCases.count ? crypto.map(\.openRatio).min() : nil }
    var incrementalRatio: Double? {
        guard let s = incrementalSmall?.medianMs, let l = incrementalLarge?.medianMs else { return nil }
        return l / s
    }

    /// The targets of Docs/benchmarks.md: seal/open ratios, push and pull on SQLite (500 bytes and 16 KiB,
    /// those of the commitment pages, §2 and §3), incremental sync.
    static let ratioTarget = 0.9, incrementalTarget = 1.2
    static let pushTarget: [RecordSize: Double] = [.small: 20_000, .large: 6_000]
    static let pullTarget: [RecordSize: Double] = [.small: 40_000, .large: 10_000]
    /// PostgreSQL's push and pull within 20 % of SQLite's: its 500-byte figure over SQLite's, same run.
    static let postgresShareTarget = 0.8

    /// The PostgreSQL figure `figure` picks over SQLite's, for 500-byte records; nil without either.
    func postgresShare(_ figure: (PushPullResult) -> Double) -> Double? {
        guard let p = pp(.postgres, .small), let s = pp(.sqlite, .small) else { return nil }
        return figure(p) / figure(s)
    }

    var notesForOutput: [String] {
        var out = [
            "ratios are figure / floor in records/s (1.0 = as fast as the floor); incremental_ratio is time(large) / time(small)",
            "unsuffixed push_*/pull_* keys are the 500-byte run (the size the push and pull targets are about); *_16k keys are the 16 KiB run",
            "record sizes: 500 B = 496-byte ciphertext (payload padded to 480), 16k = 16,400-byte ciphertext (payload padded to 16,384)",
            "push = PatientVault.sync() of pending outcomes (sealed beforehand, not timed); pull = DoctorReader.view() of the category with a cold cache",
            "pull_100k_*: `carevault-doctor show PATIENT --json` (release build, its own process, a device with a remembered key) of 100,000 activities with 496-byte ciphertexts; peak RSS is its own VmHWM, the time covers pull, checks, cache, decryption and output",
            "load: mixed pushes of \(LoadBench.pushSize) outcome envelopes and pulls of \(LoadBench.pullSize) changes on SQLite; server_rss_mib is the peak RSS (VmHWM) of the carevault-server process during the level; the load clients run in the bench process on the same 2 cores",
        ]
        if plan.quick {
            out.append(
                "quick run: incremental_100k_ms is measured with \(plan.incrementalLarge) records (see incremental_large_records); "
                    + "the 16 KiB push/pull uses \(plan.pushCount(.large)) records; fewer reps"
            )
        }
        if let p = postgresUnavailable { out.append("PostgreSQL unavailable: \(p); postgres figures are null") }
        return out + notes
    }

    // MARK: JSON

    func json() -> JSONValue {
        var f: [(String, JSONValue)] = []
        f.append(("seal_ratio", .num(sealRatio, 3)))
        f.append(("open_ratio", .num(openRatio, 3)))
        for s in RecordSize.allCases { f.append(("seal_ratio_\(s.key)", .num(crypto(s)?.sealRatio, 3))) }
        for s in RecordSize.allCases { f.append(("open_ratio_\(s.key)", .num(crypto(s)?.openRatio, 3))) }
        for b in BackendKind.allCases { f.append(("push_\(b.rawValue)_rps", .num(pp(b, .small)?.pushRps, 0))) }
        for b in BackendKind.allCases { f.append(("push_\(b.rawValue)_ratio", .num(pp(b, .small)?.pushRatio, 3))) }
        for b in BackendKind.allCases { f.append(("pull_\(b.rawValue)_rps", .num(pp(b, .small)?.pullRps, 0))) }
        for b in BackendKind.allCases { f.append(("pull_\(b.rawValue)_ratio", .num(pp(b, .small)?.pullRatio, 3))) }
        f.append(("push_postgres_vs_sqlite", .num(postgresShare(\.pushRps), 3)))
        f.append(("pull_postgres_vs_sqlite", .num(postgresShare(\.pullRps), 3)))
        // Bytes on the wire per 500-byte record (binary batch and page bodies); the backend does not change them.
        let wire = pp(.sqlite, .small) ?? pp(.postgres, .small)
        f.append(
            (
                "wire_bytes_per_record_500",
                .object([("push", wire.map { .int($0.pushWireBytes) } ?? .null), ("pull", wire.map { .int($0.pullWireBytes) } ?? .null)])
            )
        )
        f.append(("commitment_us_per_record", .num(commitment?.usPerRecord, 2)))
        f.append(("commitment_sign_us", .num(commitment?.signUs, 1)))
        f.append(("commitment_verify_us", .num(commitment?.verifyUs, 1)))
        f.append(("commitment_share_of_open", .num(commitment?.perRecordShareOfOpen, 3)))
        f.append(("incremental_1k_ms", .num(incrementalSmall?.medianMs, 2)))
        f.append(("incremental_100k_ms", .num(incrementalLarge?.medianMs, 2)))
        f.append(("incremental_ratio", .num(incrementalRatio, 3)))
        f.append(
            (
                "load",
                .array(
                    load.map { l in
                        .object([
                            ("clients", .int(l.clients)), ("rps", .num(l.rps, 1)), ("p50_ms", .num(l.p50Ms, 2)), ("p99_ms", .num(l.p99Ms, 2)),
                            ("server_rss_mib", .num(l.rssMiB, 1)), ("requests", .int(l.requests)), ("pushes", .int(l.work.pushes)),
                            ("pulls", .int(l.work.pulls)),
                            ("errors", .int(l.work.errors)), ("seconds", .num(l.seconds, 2)),
                        ])
                    }
                )
            )
        )
        f.append(("login_ms", .num(login?.medianLoginMs, 1)))
        f.append(("pull_100k_peak_rss_mib", .num(doctorMemory?.peakRSSMiB, 1)))
        f.append(("pull_100k_seconds", .num(doctorMemory?.seconds, 2)))
        f.append(("pull_100k_records", doctorMemory.map { .int($0.records) } ?? .null))
        f.append(("live_p50_ms", .num(live?.alone.p50Ms, 1)))
        f.append(("live_p99_ms", .num(live?.alone.p99Ms, 1)))
        f.append(("live_idle_streams", live.map { .int($0.idle) } ?? .null))
        f.append(("live_p50_ms_1000", .num(live?.crowded?.p50Ms, 1)))
        f.append(("live_p99_ms_1000", .num(live?.crowded?.p99Ms, 1)))
        f.append(("live_kib_per_subscriber", .num(live?.kibPerSubscriber, 1)))
        f.append(("live_kib_per_subscriber_warm", .num(live?.kibPerSubscriberWarm, 1)))
        f.append(("live_kib_per_connection_floor", .num(live?.kibPerConnection, 1)))
        f.append(("live_kib_per_connection_floor_warm", .num(live?.kibPerConnectionWarm, 1)))
        f.append(("live_p50_ms_pg2", .num(live?.pg2?.p50Ms, 1)))
        f.append(("live_p99_ms_pg2", .num(live?.pg2?.p99Ms, 1)))

        // Details: every figure beside its floor.
        for s in RecordSize.allCases {
            let c = crypto(s)
            f.append(("seal_rps_\(s.key)", .num(c?.sealRps, 0)))
            f.append(("seal_floor_rps_\(s.key)", .num(c?.sealFloorRps, 0)))
            f.append(("open_rps_\(s.key)", .num(c?.openRps, 0)))
            f.append(("open_floor_rps_\(s.key)", .num(c?.openFloorRps, 0)))
            f.append(("seal_record_rps_\(s.key)", .num(c?.sealRecordRps, 0)))
            f.append(("open_record_rps_\(s.key)", .num(c?.openRecordRps, 0)))
            f.append(("seal_record_ratio_\(s.key)", .num(c?.sealRecordRatio, 3)))
            f.append(("open_record_ratio_\(s.key)", .num(c?.openRecordRatio, 3)))
            f.append(("ciphertext_bytes_\(s.key)", c.map { .int($0.ciphertextBytes) } ?? .null))
        }
        for b in BackendKind.allCases {
            for s in RecordSize.allCases {
                let r = pp(b, s)
                let k = "\(b.rawValue)_\(s.key)"
                f.append(("push_records_\(k)", r.map { .int($0.count) } ?? .null))
                f.append(("push_\(b.rawValue)_rps_\(s.key)", .num(r?.pushRps, 0)))
                f.append(("push_\(b.rawValue)_floor_rps_\(s.key)", .num(r?.pushFloorRps, 0)))
                f.append(("push_\(b.rawValue)_ratio_\(s.key)", .num(r?.pushRatio, 3)))
                f.append(("pull_\(b.rawValue)_rps_\(s.key)", .num(r?.pullRps, 0)))
                f.append(("pull_\(b.rawValue)_floor_rps_\(s.key)", .num(r?.pullFloorRps, 0)))
                f.append(("pull_\(b.rawValue)_ratio_\(s.key)", .num(r?.pullRatio, 3)))
                f.append(("pull_\(b.rawValue)_commitment_floor_rps_\(s.key)", .num(r?.pullCommittedFloorRps, 0)))
                f.append(("pull_\(b.rawValue)_commitment_ratio_\(s.key)", .num(r?.pullCommittedRatio, 3)))
                f.append(("push_\(b.rawValue)_server_only_rps_\(s.key)", .num(r?.serverPushRps, 0)))
                f.append(("pull_\(b.rawValue)_server_only_rps_\(s.key)", .num(r?.serverPullRps, 0)))
                f.append(("stored_envelope_bytes_\(k)", r.map { .int($0.storedEnvelopeBytes) } ?? .null))
            }
        }
        f.append(("incremental_small_records", .int(plan.incrementalSmall)))
        f.append(("incremental_large_records", .int(plan.incrementalLarge)))
        f.append(("login_argon2id_ms", .num(login?.medianArgon2Ms, 1)))
        f.append(("login_ratio", .num(login.map { $0.medianArgon2Ms / $0.medianLoginMs }, 3)))
        f.append(("quick", .bool(plan.quick)))
        f.append(("cores", .int(ProcessInfo.processInfo.activeProcessorCount)))
        f.append(("libsodium", .string(Sodium.version)))
        f.append(("elapsed_s", .num(elapsedSeconds, 1)))
        f.append(("notes", .array(notesForOutput.map { .string($0) })))
        f.append(("errors", .array(errors.map { .string($0) })))
        return .object(f)
    }

    static func cpuModel() -> String? {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            return line.split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}
