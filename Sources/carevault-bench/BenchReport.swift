import Foundation
import VaultCrypto

/// Everything one run measured, rendered as the table for people or as the JSON object described in Docs/benchmarks.md.
struct BenchReport {
    let plan: BenchPlan
    var crypto: [CryptoResult] = []
    var pushPull: [PushPullResult] = []
    var postgresUnavailable: String?
    var incrementalSmall: IncrementalSyncResult?
    var incrementalLarge: IncrementalSyncResult?
    var load: [LoadLevelResult] = []
    var login: LoginResult?
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

    static let ratioTarget = 0.8, rpsTarget = 10_000.0, incrementalTarget = 1.2

    var notesForOutput: [String] {
        var out = [
            "ratios are figure / floor in records/s (1.0 = as fast as the floor); incremental_ratio is time(large) / time(small)",
            "unsuffixed push_*/pull_* keys are the 500-byte run (the size the 10,000 records/s target is about); *_16k keys are the 16 KiB run",
            "record sizes: 500 B = 496-byte ciphertext (payload padded to 480), 16k = 16,400-byte ciphertext (payload padded to 16,384)",
            "push = PatientVault.sync() of pending outcomes (sealed beforehand, not timed); pull = DoctorReader.view() of the category with a cold cache",
            "load: mixed pushes of \(LoadBench.pushSize) outcome envelopes and pulls of \(LoadBench.pullSize) changes on SQLite; server_rss_mib is the peak RSS (VmHWM) of the carevault-server process during the level; the load clients run in the bench process on the same 2 cores",
        ]
        if plan.quick {
            out.append("quick run: incremental_100k_ms is measured with \(plan.incrementalLarge) records (see incremental_large_records); "
                       + "the 16 KiB push/pull uses \(plan.pushCount(.large)) records; fewer reps")
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
        f.append(("incremental_1k_ms", .num(incrementalSmall?.medianMs, 2)))
        f.append(("incremental_100k_ms", .num(incrementalLarge?.medianMs, 2)))
        f.append(("incremental_ratio", .num(incrementalRatio, 3)))
        f.append(("load", .array(load.map { l in
            .object([("clients", .int(l.clients)), ("rps", .num(l.rps, 1)), ("p50_ms", .num(l.p50Ms, 2)), ("p99_ms", .num(l.p99Ms, 2)),
                     ("server_rss_mib", .num(l.rssMiB, 1)), ("requests", .int(l.requests)), ("pushes", .int(l.work.pushes)), ("pulls", .int(l.work.pulls)),
                     ("errors", .int(l.work.errors)), ("seconds", .num(l.seconds, 2))])
        })))
        f.append(("login_ms", .num(login?.medianLoginMs, 1)))

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

    // MARK: Table

    func table() -> String {
        var out: [String] = []
        let cpu = Self.cpuModel().map { ", \($0)" } ?? ""
        out.append("CareVault benchmark (\(plan.quick ? "quick" : "full") run, \(ProcessInfo.processInfo.activeProcessorCount) cores\(cpu), libsodium \(Sodium.version))")
        out.append("Every figure is shown beside its floor measured in the same run; ratio = figure / floor (1.00 = as fast as the floor).")

        func row(_ cells: [String], _ widths: [Int]) -> String {
            zip(cells, widths).enumerated().map { i, p in i == 0 ? p.0.padding(toLength: p.1, withPad: " ", startingAt: 0) : String(repeating: " ", count: max(0, p.1 - p.0.count)) + p.0 }
                .joined(separator: "  ")
        }
        let w = [34, 11, 11, 7, 10, 7]
        func status(_ ok: Bool?) -> String { ok.map { $0 ? "met" : "MISSED" } ?? "" }

        out.append("")
        out.append("1. Envelope seal / open, records/s (median of \(plan.cryptoReps) interleaved reps; ratio = median of per-rep ratios;")
        out.append("   floor: raw XChaCha20-Poly1305 + Ed25519 sign (seal) / verify (open) on the same bytes, preallocated buffers)")
        out.append(row(["", "envelope", "floor", "ratio", "target", ""], w))
        for s in RecordSize.allCases {
            guard let c = crypto(s) else {
                out.append("   \(s.label): not measured")
                continue
            }
            out.append(row(["seal \(s.label) (ct \(c.ciphertextBytes) B)", fmt(c.sealRps, 0), fmt(c.sealFloorRps, 0), fmt(c.sealRatio, 2), ">= 0.80", status(c.sealRatio >= Self.ratioTarget)], w))
            out.append(row(["open \(s.label) (ct \(c.ciphertextBytes) B)", fmt(c.openRps, 0), fmt(c.openFloorRps, 0), fmt(c.openRatio, 2), ">= 0.80", status(c.openRatio >= Self.ratioTarget)], w))
        }
        for s in RecordSize.allCases {
            guard let c = crypto(s) else { continue }
            out.append(row(["  with record JSON, seal \(s.label)", fmt(c.sealRecordRps, 0), fmt(c.sealFloorRps, 0), fmt(c.sealRecordRatio, 2), "", ""], w))
            out.append(row(["  with record JSON, open \(s.label)", fmt(c.openRecordRps, 0), fmt(c.openFloorRps, 0), fmt(c.openRecordRatio, 2), "", ""], w))
        }

        out.append("")
        out.append("2. Push through carevault-server (patient sync: upload, verify, store), records/s")
        out.append("   floor: inserts of as many same-size rows into a fresh table of the same database, 500 per transaction")
        out.append("   server alone: the same number of envelopes, sealed and JSON-encoded beforehand, posted in batches of 500 (no SDK client work)")
        out.append(row(["", "push", "floor", "ratio", "target", ""], w))
        for b in BackendKind.allCases {
            for s in RecordSize.allCases {
                let label = "\(b.label) \(s.label) x \(plan.pushCount(s))"
                guard let r = pp(b, s) else {
                    out.append(row([label, "null", "", "", "", ""], w))
                    continue
                }
                let target = b == .sqlite && s == .small
                out.append(row([label, fmt(r.pushRps, 0), fmt(r.pushFloorRps, 0), fmt(r.pushRatio, 2), target ? ">= 10000" : "", target ? status(r.pushRps >= Self.rpsTarget) : ""], w))
                out.append(row(["  server alone", fmt(r.serverPushRps, 0), fmt(r.pushFloorRps, 0), fmt(r.serverPushRps / r.pushFloorRps, 2), "", ""], w))
            }
        }
        out.append("")
        out.append("3. Doctor pull + decrypt (view of the category, cold cache), records/s")
        out.append("   floor: paged select of those rows + raw Ed25519 verify + XChaCha20-Poly1305 decrypt")
        out.append("   server alone: the doctor's pages of 1,000 fetched as raw bytes (no decoding, verification or decryption)")
        out.append(row(["", "pull", "floor", "ratio", "target", ""], w))
        for b in BackendKind.allCases {
            for s in RecordSize.allCases {
                let label = "\(b.label) \(s.label) x \(plan.pushCount(s))"
                guard let r = pp(b, s) else {
                    out.append(row([label, "null", "", "", "", ""], w))
                    continue
                }
                let target = b == .sqlite && s == .small
                out.append(row([label, fmt(r.pullRps, 0), fmt(r.pullFloorRps, 0), fmt(r.pullRatio, 2), target ? ">= 10000" : "", target ? status(r.pullRps >= Self.rpsTarget) : ""], w))
                out.append(row(["  server alone (raw pages)", fmt(r.serverPullRps, 0), "", "", "", ""], w))
            }
        }
        if let p = postgresUnavailable { out.append("   PostgreSQL unavailable (\(p)): its figures are null") }

        out.append("")
        out.append("4. Incremental sync of one changed record (SQLite; median of \(plan.incrementalReps) syncs), ms")
        if plan.quick { out.append("   quick run: the large store holds \(plan.incrementalLarge) records instead of 100,000") }
        out.append(row(["store of \(plan.incrementalSmall) records", incrementalSmall.map { fmt($0.medianMs, 2) } ?? "null", "", "", "", ""], w))
        out.append(row(["store of \(plan.incrementalLarge) records", incrementalLarge.map { fmt($0.medianMs, 2) } ?? "null", "", "", "", ""], w))
        out.append(row(["ratio large / small", incrementalRatio.map { fmt($0, 2) } ?? "null", "", "", "<= 1.2", status(incrementalRatio.map { $0 <= Self.incrementalTarget })], w))

        out.append("")
        out.append("5. Server under load: 127.0.0.1, SQLite, each client on its own connection alternating pushes of \(LoadBench.pushSize) envelopes")
        out.append("   and pulls of \(LoadBench.pullSize) changes; each level bounded to \(Int(plan.loadSeconds)) s and \(plan.loadRequestBudget) requests.")
        out.append("   the server is the release carevault-server in its own process; peak RSS is its VmHWM during the level.")
        let lw = [10, 10, 10, 10, 14, 10, 8]
        out.append(row(["clients", "req/s", "p50 ms", "p99 ms", "peak RSS MiB", "requests", "errors"], lw))
        for l in load {
            out.append(row([String(l.clients), fmt(l.rps, 0), fmt(l.p50Ms, 2), fmt(l.p99Ms, 2), l.rssMiB.map { fmt($0, 0) } ?? "n/a", String(l.requests), String(l.work.errors)], lw))
        }
        if load.isEmpty { out.append("   not measured") }

        out.append("")
        out.append("6. Login with Argon2id \(KDFParameters.moderate) (the default; a deliberate cost), median of \(plan.loginReps)")
        if let l = login {
            out.append(row(["login", fmt(l.medianLoginMs, 0) + " ms", "", "", "", ""], w))
            out.append(row(["floor: Argon2id alone", fmt(l.medianArgon2Ms, 0) + " ms", "", fmt(l.medianArgon2Ms / l.medianLoginMs, 2), "", ""], w))
        } else {
            out.append("   not measured")
        }

        out.append("")
        out.append("Notes:")
        for n in notesForOutput { out.append("  - " + n) }
        if !errors.isEmpty {
            out.append("Errors:")
            for e in errors { out.append("  - " + e) }
        }
        out.append(String(format: "Total time: %.1f s", elapsedSeconds))
        return out.joined(separator: "\n")
    }

    static func cpuModel() -> String? {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            return line.split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }
}
