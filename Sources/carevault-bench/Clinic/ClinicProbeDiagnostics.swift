import Foundation
import PostgresNIO

/// Where a growth probe's time went, so the probe at 10,000 records and the one at all records can be
/// compared line by line: the instances' own request times by route, and on PostgreSQL the statements that
/// took its time and the write-ahead log the probe wrote (records, full-page images, bytes). A full-page
/// image is written for the first change to each page after a checkpoint; the probe runs right after one.
struct ClinicProbeDiagnostics: Sendable {
    let instances: ClinicInstances
    let postgres: ClinicPostgres?

    struct WAL: Sendable {
        var records: Int64 = 0
        var fullPages: Int64 = 0
        var bytes: Int64 = 0
    }

    /// Starts a probe's diagnostics: statement times forgotten, the log's counters and the histograms read.
    func begin() async -> ClinicServerTimes {
        let times = ClinicServerTimes(instances: instances, minimumCount: 5)
        if let postgres { try? await ClinicDatabase.resetStatements(postgres.url) }
        await times.begin()
        return times
    }

    /// The report's lines for one probe of `syncs` syncs.
    func finish(_ times: ClinicServerTimes, walBefore: WAL?, syncs: Int, seconds: Double) async -> [String] {
        var lines = await times.finish(seconds: seconds)
        guard let postgres else { return lines }
        if let before = walBefore, let after = try? await Self.wal(postgres.url) {
            let n = Double(max(syncs, 1))
            lines.append(
                "write-ahead log per probe sync (its refreshes included): \(fmt(Double(after.records - before.records) / n, 1)) records, "
                    + "\(fmt(Double(after.fullPages - before.fullPages) / n, 1)) full-page images, \(fmt(Double(after.bytes - before.bytes) / n / 1_024, 1)) KiB"
            )
        }
        for s in (try? await ClinicDatabase.topStatements(postgres.url, limit: 6)) ?? [] {
            lines.append("\(fmt(s.totalMs, 1)) ms in \(s.calls) calls (mean \(fmt(s.meanMs, 3)) ms): \(s.query)")
        }
        return lines
    }

    /// PostgreSQL's write-ahead log counters (`pg_stat_wal`), nil on SQLite.
    func wal() async -> WAL? {
        guard let postgres else { return nil }
        return try? await Self.wal(postgres.url)
    }

    static func wal(_ url: String) async throws -> WAL {
        try await ClinicDatabase.withPostgres(url) { client, logger in
            let rows = try await client.query("SELECT wal_records::BIGINT, wal_fpi::BIGINT, wal_bytes::BIGINT FROM pg_stat_wal", logger: logger)
            for try await (records, fpi, bytes) in rows.decode((Int64, Int64, Int64).self) {
                return WAL(records: records, fullPages: fpi, bytes: bytes)
            }
            return WAL()
        }
    }
}
