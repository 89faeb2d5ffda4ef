import Foundation
import GRDB
import VaultCrypto

/// The floor of a pull whose records the patient's state commitment authenticates
/// (Docs/commitment-pages.md, Docs/benchmarks.md §3): what must remain per record once the Ed25519 check
/// goes, with nothing of CareVault around it. The same paged select as the pull floor with each row
/// hashed, folded into an LtHash16 state and decrypted (`RawEnvelopeFloor.openCommitted`), plus storing
/// every row in a local SQLite cache as a doctor's device does: the record id and the envelope, in
/// transactions of one page (1,000 rows) with one prepared statement, in the doctor's cache's configuration.
enum CommittedPullFloor {
    /// The seconds of both steps over the floor table's `count` rows, the cache in a fresh file under `root`.
    static func seconds(_ floor: any DatabaseFloor, raw: RawEnvelopeFloor, count: Int, envelopeBytes: Int, root: URL) async throws -> Double {
        let (read, scanSeconds) = try await Measure.timeAsync { try await floor.scan(pageSize: 1_000) { raw.openCommitted($0) } }
        guard read == count else { throw BenchError("the commitment floor read \(read) rows, expected \(count)") }
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        // The doctor's cache's configuration (`DeviceDatabase.walConfiguration`, `cachePageSize`): pages of
        // 64 KiB, WAL, NORMAL sync.
        var config = Configuration()
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA page_size = 65536; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL")
        }
        let cache = try DatabaseQueue(path: root.appendingPathComponent("floor-cache-\(UUID().uuidString).sqlite").path, configuration: config)
        try await cache.write { db in
            try db.execute(sql: "CREATE TABLE cached (record_id TEXT PRIMARY KEY, envelope BLOB NOT NULL)")
        }
        let blob = Data(RandomBytes.bytes(count: envelopeBytes))
        let ids = (0..<count).map { _ in Hex.encode(RandomBytes.bytes(count: 32)) }
        let (_, storeSeconds) = try await Measure.timeAsync {
            for start in stride(from: 0, to: count, by: 1_000) {
                try await cache.write { db in
                    let insert = try db.cachedStatement(sql: "INSERT INTO cached (record_id, envelope) VALUES (?, ?)")
                    for id in ids[start..<min(start + 1_000, count)] { try insert.execute(arguments: [id, blob]) }
                }
            }
        }
        return scanSeconds + storeSeconds
    }
}
