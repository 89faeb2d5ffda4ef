import Foundation
import VaultCore
import VaultCrypto

/// The table for people: the same figures as the JSON object, each beside its floor.
extension BenchReport {
    /// The first column left-aligned, the others right-aligned, two spaces apart.
    static func row(_ cells: [String], _ widths: [Int]) -> String {
        zip(cells, widths).enumerated().map { i, p in
            i == 0 ? p.0.padding(toLength: p.1, withPad: " ", startingAt: 0) : String(repeating: " ", count: max(0, p.1 - p.0.count)) + p.0
        }.joined(separator: "  ")
    }

    static func status(_ ok: Bool?) -> String { ok.map { $0 ? "met" : "MISSED" } ?? "" }

    /// The column widths of every section but the load table.
    static let widths = [34, 11, 11, 7, 10, 7]

    func table() -> String {
        var out: [String] = []
        let cpu = Self.cpuModel().map { ", \($0)" } ?? ""
        let cores = ProcessInfo.processInfo.activeProcessorCount
        out.append("CareVault benchmark (\(plan.quick ? "quick" : "full") run, \(cores) cores\(cpu), libsodium \(Sodium.version))")
        out.append("Every figure is shown beside its floor measured in the same run; ratio = figure / floor (1.00 = as fast as the floor).")
        out += cryptoSection() + throughputSections() + incrementalSection() + loadSection() + loginSection() + doctorMemorySection() + liveSection()
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

    func cryptoSection() -> [String] {
        let w = Self.widths
        var out = [
            "", "1. Envelope seal / open, records/s (median of \(plan.cryptoReps) interleaved reps; ratio = median of per-rep ratios;",
            "   floor: raw XChaCha20-Poly1305 + Ed25519 sign (seal) / verify (open) on the same bytes, preallocated buffers)",
            Self.row(["", "envelope", "floor", "ratio", "target", ""], w),
        ]
        for s in RecordSize.allCases {
            guard let c = crypto(s) else {
                out.append("   \(s.label): not measured")
                continue
            }
            let seal = "seal \(s.label) (ct \(c.ciphertextBytes) B)"
            let open = "open \(s.label) (ct \(c.ciphertextBytes) B)"
            let sealMet = Self.status(c.sealRatio >= Self.ratioTarget)
            let openMet = Self.status(c.openRatio >= Self.ratioTarget)
            out.append(Self.row([seal, fmt(c.sealRps, 0), fmt(c.sealFloorRps, 0), fmt(c.sealRatio, 2), ">= 0.90", sealMet], w))
            out.append(Self.row([open, fmt(c.openRps, 0), fmt(c.openFloorRps, 0), fmt(c.openRatio, 2), ">= 0.90", openMet], w))
        }
        for s in RecordSize.allCases {
            guard let c = crypto(s) else { continue }
            let seal = "  with record JSON, seal \(s.label)"
            let open = "  with record JSON, open \(s.label)"
            out.append(Self.row([seal, fmt(c.sealRecordRps, 0), fmt(c.sealFloorRps, 0), fmt(c.sealRecordRatio, 2), "", ""], w))
            out.append(Self.row([open, fmt(c.openRecordRps, 0), fmt(c.openFloorRps, 0), fmt(c.openRecordRatio, 2), "", ""], w))
        }
        if let m = commitment {
            out.append("   state commitment (Docs/envelope-v1.md §3.4), microseconds:")
            out.append(
                "     per changed record (LtHash: one removal, one addition) \(fmt(m.usPerRecord, 2)), beside an open of 500 B \(fmt(m.openUs, 2)) (\(fmt(m.perRecordShareOfOpen * 100, 1)) %)"
            )
            out.append(
                "     per commitment: sign \(fmt(m.signUs, 1)) (once per push batch and tresor), verify \(fmt(m.verifyUs, 1)) (once per completed pull and tresor)"
            )
        }
        return out
    }

    /// Sections 2 (push) and 3 (pull): per backend and size, the figure against its floor (the target
    /// is about SQLite with small records), then what the server alone manages.
    func throughputSections() -> [String] {
        let push: [String] = [
            "", "2. Push through carevault-server (patient sync: upload, verify, store), records/s",
            "   floor: inserts of as many same-size rows into a fresh table of the same database, 500 per transaction",
            "   server alone: the same number of envelopes, sealed and framed (binary) beforehand, posted in batches of 500 (no SDK client work)",
        ]
        let pull: [String] = [
            "", "3. Doctor pull + decrypt (view of the category, cold cache), records/s",
            "   floor: paged select of those rows + raw Ed25519 verify + XChaCha20-Poly1305 decrypt",
            "   server alone: the doctor's pages of 1,000 fetched as raw bytes (no decoding, verification or decryption)",
        ]
        var out = push
        out += throughput("push", target: Self.pushTarget, figure: { ($0.pushRps, $0.pushFloorRps, $0.pushRatio) }, beside: { [Self.serverPush($0)] })
        out.append(postgresShareRow(postgresShare(\.pushRps)))
        out += pull
        out += throughput(
            "pull",
            target: Self.pullTarget,
            figure: { ($0.pullRps, $0.pullFloorRps, $0.pullRatio) },
            beside: { [Self.committedFloor($0), Self.serverPull($0)] }
        )
        out.append(postgresShareRow(postgresShare(\.pullRps)))
        if let p = postgresUnavailable { out.append("   PostgreSQL unavailable (\(p)): its figures are null") }
        return out
    }

    /// The row of PostgreSQL's 500-byte figure over SQLite's, against "within 20 %".
    func postgresShareRow(_ share: Double?) -> String {
        Self.row(
            [
                "PostgreSQL / SQLite, 500 B", "", "", share.map { fmt($0, 2) } ?? "null", ">= \(fmt(Self.postgresShareTarget, 2))",
                Self.status(share.map { $0 >= Self.postgresShareTarget }),
            ],
            Self.widths
        )
    }

    /// The server-alone rows of the push and pull sections.
    static func serverPush(_ r: PushPullResult) -> [String] {
        ["  server alone", fmt(r.serverPushRps, 0), fmt(r.pushFloorRps, 0), fmt(r.serverPushRps / r.pushFloorRps, 2), "", ""]
    }

    /// The pull beside the floor of what must remain once the commitment authenticates the pages
    /// (`CommittedPullFloor`: select, hash, LtHash, decrypt, cache write).
    static func committedFloor(_ r: PushPullResult) -> [String] {
        ["  against the commitment floor", "", fmt(r.pullCommittedFloorRps, 0), fmt(r.pullCommittedRatio, 2), "", ""]
    }

    static func serverPull(_ r: PushPullResult) -> [String] {
        ["  server alone (raw pages)", fmt(r.serverPullRps, 0), "", "", "", ""]
    }

    func throughput(
        _ name: String,
        target targets: [RecordSize: Double],
        figure: (PushPullResult) -> (rps: Double, floor: Double, ratio: Double),
        beside: (PushPullResult) -> [[String]]
    ) -> [String] {
        let w = Self.widths
        var out = [Self.row(["", name, "floor", "ratio", "target", ""], w)]
        for b in BackendKind.allCases {
            for s in RecordSize.allCases {
                let label = "\(b.label) \(s.label) x \(plan.pushCount(s))"
                guard let r = pp(b, s) else {
                    out.append(Self.row([label, "null", "", "", "", ""], w))
                    continue
                }
                let target = b == .sqlite ? targets[s] : nil
                let f = figure(r)
                out.append(
                    Self.row(
                        [
                            label, fmt(f.rps, 0), fmt(f.floor, 0), fmt(f.ratio, 2), target.map { ">= \(Int($0))" } ?? "",
                            target.map { Self.status(f.rps >= $0) } ?? "",
                        ],
                        w
                    )
                )
                for row in beside(r) { out.append(Self.row(row, w)) }
            }
        }
        return out
    }

    func incrementalSection() -> [String] {
        let w = Self.widths
        var out = ["", "4. Incremental sync of one changed record (SQLite; median of \(plan.incrementalReps) syncs), ms"]
        if plan.quick { out.append("   quick run: the large store holds \(plan.incrementalLarge) records instead of 100,000") }
        out.append(
            Self.row(["store of \(plan.incrementalSmall) records", incrementalSmall.map { fmt($0.medianMs, 2) } ?? "null", "", "", "", ""], w)
        )
        out.append(
            Self.row(["store of \(plan.incrementalLarge) records", incrementalLarge.map { fmt($0.medianMs, 2) } ?? "null", "", "", "", ""], w)
        )
        let ratio = incrementalRatio.map { fmt($0, 2) } ?? "null"
        out.append(Self.row(["ratio large / small", ratio, "", "", "<= 1.2", Self.status(incrementalRatio.map { $0 <= Self.incrementalTarget })], w))
        return out
    }

    func loadSection() -> [String] {
        var out = [
            "",
            "5. Server under load: 127.0.0.1, SQLite, each client on its own connection alternating pushes of "
                + "\(LoadBench.pushSize) envelopes",
            "   and pulls of \(LoadBench.pullSize) changes; each level bounded to \(Int(plan.loadSeconds)) s and "
                + "\(plan.loadRequestBudget) requests.",
            "   the server is the release carevault-server in its own process; peak RSS is its VmHWM during the level.",
        ]
        let lw = [10, 10, 10, 10, 14, 10, 8]
        out.append(Self.row(["clients", "req/s", "p50 ms", "p99 ms", "peak RSS MiB", "requests", "errors"], lw))
        for l in load {
            let rss = l.rssMiB.map { fmt($0, 0) } ?? "n/a"
            let latency = [fmt(l.p50Ms, 2), fmt(l.p99Ms, 2)]
            out.append(Self.row([String(l.clients), fmt(l.rps, 0)] + latency + [rss, String(l.requests), String(l.work.errors)], lw))
        }
        if load.isEmpty { out.append("   not measured") }
        return out
    }

    func doctorMemorySection() -> [String] {
        let w = Self.widths
        var out = [
            "",
            "7. The doctor's first read of \(plan.doctorMemoryRecords) records: carevault-doctor show --json, release, its own process",
        ]
        guard let m = doctorMemory else { return out + ["   not measured"] }
        let peak = m.peakRSSMiB
        out.append(Self.row(["peak RSS", fmt(peak, 1) + " MiB", "", "", "< 150", Self.status(peak < 150)], w))
        out.append(Self.row(["wall time", fmt(m.seconds, 1) + " s", fmt(m.recordsPerSecond, 0) + " rec/s", "", "", ""], w))
        return out
    }

    func loginSection() -> [String] {
        let w = Self.widths
        var out = ["", "6. Login with Argon2id \(KDFParameters.moderate) (the default; a deliberate cost), median of \(plan.loginReps)"]
        if let l = login {
            out.append(Self.row(["login", fmt(l.medianLoginMs, 0) + " ms", "", "", "", ""], w))
            let ratio = fmt(l.medianArgon2Ms / l.medianLoginMs, 2)
            out.append(Self.row(["floor: Argon2id alone", fmt(l.medianArgon2Ms, 0) + " ms", "", ratio, "", ""], w))
        } else {
            out.append("   not measured")
        }
        return out
    }

    func liveSection() -> [String] {
        let w = Self.widths
        var out = ["", "8. Live updates: a patient's push returning to a watching doctor's printed line (carevault-doctor watch, release)"]
        guard let l = live else { return out + ["   not measured"] }
        func line(_ label: String, _ r: LiveResult?, target: Double?) {
            guard let r else { return out.append(Self.row([label, "not measured", "", "", "", ""], w)) }
            let status = target.map { Self.status(r.p99Ms <= $0) } ?? ""
            out.append(
                Self.row(
                    [label, "p99 " + fmt(r.p99Ms, 1) + " ms", "p50 " + fmt(r.p50Ms, 1) + " ms", "", target.map { "<= " + fmt($0, 0) } ?? "", status],
                    w
                )
            )
        }
        line("SQLite, alone", l.alone, target: nil)
        line("SQLite, \(l.idle) idle streams", l.crowded, target: 250)
        line("PostgreSQL, two instances", l.pg2, target: 500)
        func memory(_ label: String, _ stream: Double?, _ floor: Double?, target: Bool) {
            guard let stream else { return }
            out.append(
                Self.row(
                    [
                        label, fmt(stream, 1) + " KiB", floor.map { "connection alone " + fmt($0, 1) + " KiB" } ?? "",
                        floor.map { fmt(stream / $0, 2) } ?? "", target ? "<= 32" : "", target ? Self.status(stream <= 32) : "",
                    ],
                    w
                )
            )
        }
        memory("server memory per idle stream", l.kibPerSubscriber, l.kibPerConnection, target: true)
        memory("  opened again (reused memory)", l.kibPerSubscriberWarm, l.kibPerConnectionWarm, target: false)
        return out
    }
}
