import Foundation

/// The clinic's figures as the JSON object of Docs/benchmarks.md ("The clinic") and as lines for people.
extension ClinicResult {
    /// The targets of the clinic issue on the 2-core machine.
    static let syncP99Target = 250.0, refreshP99Target = 500.0, growthTarget = 1.25, rssTarget = 256.0

    func fields() -> [(String, JSONValue)] {
        var f: [(String, JSONValue)] = [
            ("clinic_backend", .string(backend.rawValue)),
            ("clinic_instances", .int(instances)),
            ("clinic_patients", .int(plan.patients)),
            ("clinic_doctors", .int(plan.doctors)),
            ("clinic_records", .int(records)),
            ("clinic_load_seconds", .num(loadSeconds, 1)),
            ("clinic_workload_seconds", .num(plan.seconds, 0)),
        ]
        for o in operations {
            let k = "clinic_\(o.operation.rawValue)"
            f += [
                ("\(k)_count", .int(o.count)),
                ("\(k)_per_s", .num(o.perSecond, 2)),
                ("\(k)_p50_ms", .num(o.steady.p50, 1)),
                ("\(k)_p95_ms", .num(o.steady.p95, 1)),
                ("\(k)_p99_ms", .num(o.steady.p99, 1)),
                ("\(k)_fault_n", .int(o.fault.n)),
                ("\(k)_fault_p99_ms", .num(o.fault.p99, 1)),
                ("\(k)_fault_max_ms", .num(o.fault.max, 1)),
                ("\(k)_slowest", .array(o.slowest.map { .object([("due_s", .num($0.due, 1)), ("ms", .num($0.ms, 1))]) })),
            ]
        }
        f += [
            ("clinic_live_missed", .int(liveMissed)),
            ("clinic_errors", .int(errors)),
            ("clinic_lost", .int(audit.stored.lost)),
            ("clinic_duplicated", .int(audit.stored.duplicated)),
            ("clinic_unexpected", .int(audit.stored.unexpected)),
            ("clinic_unsent", .int(audit.unsent)),
            ("clinic_acknowledged", .int(audit.acknowledged)),
            ("clinic_views_checked", .int(audit.pairs)),
            ("clinic_view_mismatches", .int(audit.viewMismatches)),
            ("clinic_unshared_checked", .int(audit.unsharedChecked)),
            ("clinic_unshared_readable", .int(audit.unsharedReadable)),
            ("clinic_server_rss_mib", .array(serverRSS.map { .num($0, 1) })),
            ("clinic_db_mib", .num(databaseMiB, 1)),
            ("clinic_growth_ratio", .num(growth, 3)),
            ("clinic_growth_ratio_sync", .num(growthSync, 3)),
            ("clinic_growth_ratio_refresh", .num(growthRefresh, 3)),
            ("clinic_probe_small_sync_ms", .num(probeSmall?.sync, 2)),
            ("clinic_probe_small_refresh_ms", .num(probeSmall?.refresh, 2)),
            ("clinic_probe_large_sync_ms", .num(probeLarge?.sync, 2)),
            ("clinic_probe_large_refresh_ms", .num(probeLarge?.refresh, 2)),
            ("clinic_probe_large_again_sync_ms", .num(probeLargeAgain?.sync, 2)),
            ("clinic_probe_large_again_refresh_ms", .num(probeLargeAgain?.refresh, 2)),
            ("clinic_probe_diagnostics", .object(probeDiagnostics.map { ($0.0, .array($0.1.map { .string($0) })) })),
            ("clinic_slow_statements", slowStatements.map { .int($0) } ?? .null),
            ("clinic_server_times", .array(serverTimes.map { .string($0) })),
            (
                "clinic_top_statements",
                .array(
                    topStatements.map {
                        .object([
                            ("calls", .int($0.calls)), ("total_s", .num($0.totalMs / 1_000, 2)), ("mean_ms", .num($0.meanMs, 3)),
                            ("query", .string($0.query)),
                        ])
                    }
                )
            ),
            (
                "clinic_fault_windows",
                .array(windows.map { .object([("what", .string($0.what)), ("start_s", .num($0.start, 1)), ("end_s", .num($0.end, 1))]) })
            ),
            ("clinic_failures", .object(failures.sorted { $0.value > $1.value }.prefix(10).map { ($0.key, .int($0.value)) })),
            ("clinic_view_examples", .array(audit.viewExamples.map { .string($0) })),
            ("clinic_audit_examples", .array(audit.stored.examples.map { .string($0) })),
        ]
        return f
    }

    /// Whether the clinic's data held: nothing acknowledged lost or stored twice, nothing invented, every
    /// doctor's view equal to the patient's records, nothing unshared readable. A run where it did not
    /// exits non-zero; latency targets missed are reported, not failed.
    var intact: Bool {
        audit.stored.clean && audit.unsent == 0 && audit.viewMismatches == 0 && audit.unsharedReadable == 0 && audit.unsharedChecked > 0
    }

    /// Targets met and missed, in words.
    var verdicts: [String] {
        func check(_ name: String, _ value: Double?, _ ok: (Double) -> Bool, _ target: String) -> String {
            guard let value else { return "\(name): not measured (target \(target))" }
            return "\(name) \(fmt(value, 2)): \(ok(value) ? "met" : "MISSED") (target \(target))"
        }
        return [
            check("clinic_errors", Double(errors), { $0 == 0 }, "0"),
            check("clinic_lost", Double(audit.stored.lost), { $0 == 0 }, "0"),
            check("clinic_duplicated", Double(audit.stored.duplicated), { $0 == 0 }, "0"),
            check("clinic_unexpected", Double(audit.stored.unexpected), { $0 == 0 }, "0"),
            check("clinic_unsent", Double(audit.unsent), { $0 == 0 }, "0"),
            check("clinic_view_mismatches", Double(audit.viewMismatches), { $0 == 0 }, "0"),
            check("clinic_unshared_readable", Double(audit.unsharedReadable), { $0 == 0 }, "0"),
            check("clinic_live_missed", Double(liveMissed), { $0 == 0 }, "0"),
            check("clinic_sync_p99_ms", op(.sync)?.steady.p99, { $0 <= Self.syncP99Target }, "<= 250"),
            check("clinic_refresh_p99_ms", op(.refresh)?.steady.p99, { $0 <= Self.refreshP99Target }, "<= 500"),
            check("clinic_growth_ratio", growth, { $0 <= Self.growthTarget }, "<= 1.25"),
            check("clinic_server_rss_mib (max)", serverRSS.max(), { $0 <= Self.rssTarget }, "<= 256"),
        ]
    }

    func lines() -> [String] {
        var out = [
            "Clinic on \(backend.label), \(instances) instance(s): \(plan.patients) patients, \(plan.doctors) doctors, \(records) records (built in \(fmt(loadSeconds, 0)) s)"
        ]
        for o in operations {
            out.append(
                "  \(o.operation.rawValue): \(o.ok)/\(o.count) ok, \(fmt(o.perSecond, 2))/s; p50 \(fmt(o.steady.p50 ?? .nan, 1)) p95 \(fmt(o.steady.p95 ?? .nan, 1)) "
                    + "p99 \(fmt(o.steady.p99 ?? .nan, 1)) ms; in fault windows n=\(o.fault.n) p99 \(fmt(o.fault.p99 ?? .nan, 1)) ms"
            )
            if !o.slowest.isEmpty {
                let slowest = o.slowest.map { "\(fmt($0.ms, 0)) ms at \(fmt($0.due, 1)) s" }
                out.append("    slowest outside the windows: " + slowest.joined(separator: ", "))
            }
        }
        out.append(
            "  live changes missed: \(liveMissed); windows: \(windows.map { "\($0.what) [\(fmt($0.start, 1))-\(fmt($0.end, 1)) s]" }.joined(separator: "; "))"
        )
        out.append("  server peak RSS MiB: \(serverRSS.map { fmt($0, 1) }.joined(separator: ", ")); database \(fmt(databaseMiB, 1)) MiB")
        out += verdicts.map { "  " + $0 }
        return out
    }
}
