import Foundation
import GRDB
import VaultCore

/// One record's local head: its envelope (the same ciphertext the server holds) and what the server
/// last showed of it, so a server that replays an older version is caught.
struct LocalRecordRow: Sendable {
    var recordID: String
    var recordType: RecordType
    var tresorID: UUID
    var category: String
    var timestamp: HLCTimestamp
    var deleted: Bool
    var envelope: Envelope
    var serverTimestamp: HLCTimestamp?
    var pending: Bool
}

/// The device's local database (GRDB): envelopes of the owner's records, the outbox, the pull cursor
/// and the HLC state, with versioned migrations. Data at rest stays encrypted: reads decrypt in memory.
final class LocalStore: Sendable {
    let queue: DatabaseQueue
    static let encoder: JSONEncoder = { let e = JSONEncoder(); e.outputFormatting = [.sortedKeys]; return e }()
    /// Shared: a decoder is configured once and never changed, so decoding from several threads is safe.
    static let decoder = JSONDecoder()

    init(url: URL) throws {
        try SecureFiles.ensureDirectory(url.deletingLastPathComponent())
        var config = Configuration()
        config.busyMode = .timeout(10)
        config.prepareDatabase { db in
            // WAL with NORMAL sync: a crash loses at most the last transaction, never consistency.
            try db.execute(sql: "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL")
        }
        queue = try DatabaseQueue(path: url.path, configuration: config)
        try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
        var m = DatabaseMigrator()
        m.registerMigration("v1-local") { db in
            try db.execute(sql: """
                CREATE TABLE records (
                    record_id TEXT PRIMARY KEY,
                    record_type TEXT NOT NULL CHECK (record_type IN ('activity', 'outcome')),
                    tresor_id TEXT NOT NULL,
                    category TEXT NOT NULL,
                    hlc_physical INTEGER NOT NULL,
                    hlc_counter INTEGER NOT NULL,
                    hlc_device TEXT NOT NULL,
                    deleted INTEGER NOT NULL,
                    envelope BLOB NOT NULL,
                    server_physical INTEGER,
                    server_counter INTEGER,
                    server_device TEXT);
                CREATE INDEX records_category ON records (category, record_type);
                CREATE TABLE outbox (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    version_id TEXT NOT NULL UNIQUE,
                    record_id TEXT NOT NULL UNIQUE,
                    envelope BLOB NOT NULL);
                CREATE TABLE rejected (
                    version_id TEXT PRIMARY KEY,
                    record_id TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    at INTEGER NOT NULL);
                CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                """)
        }
        try m.migrate(queue)
    }

    // MARK: Rows

    static func row(_ r: Row) throws -> LocalRecordRow {
        let env = try decoder.decode(Envelope.self, from: r["envelope"] as Data)
        var server: HLCTimestamp?
        if let p = r["server_physical"] as Int64?, let c = r["server_counter"] as Int64?, let d = r["server_device"] as String? {
            server = HLCTimestamp(physicalMs: UInt64(p), counter: UInt32(c), deviceID: d)
        }
        return LocalRecordRow(recordID: r["record_id"], recordType: RecordType(rawValue: r["record_type"]) ?? .activity,
                              tresorID: UUID(uuidString: r["tresor_id"]) ?? UUID(), category: r["category"], timestamp: env.header.timestamp,
                              deleted: (r["deleted"] as Int64) != 0, envelope: env, serverTimestamp: server, pending: (r["pending"] as Int64? ?? 0) != 0)
    }

    static let selectRecord = """
        SELECT r.*, EXISTS (SELECT 1 FROM outbox o WHERE o.record_id = r.record_id) AS pending FROM records r
        """

    static func record(_ db: Database, _ id: String) throws -> LocalRecordRow? {
        try Row.fetchOne(db, sql: selectRecord + " WHERE r.record_id = ?", arguments: [id]).map(row)
    }

    func records(category: String? = nil, type: RecordType? = nil) throws -> [LocalRecordRow] {
        try queue.read { db in
            var sql = Self.selectRecord + " WHERE 1 = 1"
            var args: [any DatabaseValueConvertible] = []
            if let category { sql += " AND r.category = ?"; args.append(category) }
            if let type { sql += " AND r.record_type = ?"; args.append(type.rawValue) }
            return try Row.fetchAll(db, sql: sql, arguments: StatementArguments(args)).map(Self.row)
        }
    }

    /// Writes a record's new local head (and, when `outbox` is set, queues it for push) in the caller's
    /// transaction. A newer local version replaces an older unsent one for the same record.
    static func put(_ db: Database, _ env: Envelope, outbox: Bool, serverTimestamp: HLCTimestamp? = nil) throws {
        let h = env.header
        let json = try encoder.encode(env)
        // Cached statements: compiled once per connection, not once per record.
        try db.cachedStatement(sql: """
            INSERT INTO records (record_id, record_type, tresor_id, category, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (record_id) DO UPDATE SET record_type = excluded.record_type, tresor_id = excluded.tresor_id,
                category = excluded.category, hlc_physical = excluded.hlc_physical, hlc_counter = excluded.hlc_counter,
                hlc_device = excluded.hlc_device, deleted = excluded.deleted, envelope = excluded.envelope
            """).execute(arguments: [h.recordID.hex, h.recordType.rawValue, h.tresorID.uuidString, h.category, Int64(h.timestamp.physicalMs),
                                     Int64(h.timestamp.counter), h.timestamp.deviceID, h.deleted, json])
        if let s = serverTimestamp { try noteServer(db, h.recordID.hex, s) }
        if outbox {
            try dropOutbox(db, recordID: h.recordID.hex)
            try db.cachedStatement(sql: "INSERT INTO outbox (version_id, record_id, envelope) VALUES (?, ?, ?)")
                .execute(arguments: [env.versionID, h.recordID.hex, json])
        }
    }

    /// Remembers the newest version the server has shown for a record.
    static func noteServer(_ db: Database, _ recordID: String, _ t: HLCTimestamp) throws {
        try db.cachedStatement(sql: "UPDATE records SET server_physical = ?, server_counter = ?, server_device = ? WHERE record_id = ?")
            .execute(arguments: [Int64(t.physicalMs), Int64(t.counter), t.deviceID, recordID])
    }

    /// The newest version the server has shown for a record, if any (no envelope is read or decoded).
    static func serverTimestamp(_ db: Database, _ recordID: String) throws -> (exists: Bool, seen: HLCTimestamp?) {
        let statement = try db.cachedStatement(sql: "SELECT server_physical, server_counter, server_device FROM records WHERE record_id = ?")
        guard let r = try Row.fetchOne(statement, arguments: [recordID]) else { return (false, nil) }
        guard let p = r[0] as Int64?, let c = r[1] as Int64?, let d = r[2] as String? else { return (true, nil) }
        return (true, HLCTimestamp(physicalMs: UInt64(p), counter: UInt32(c), deviceID: d))
    }

    static func noteServerIfNewer(_ db: Database, _ recordID: String, _ t: HLCTimestamp) throws {
        let (exists, seen) = try serverTimestamp(db, recordID)
        guard exists else { return }
        if let seen, seen >= t { return }
        try noteServer(db, recordID, t)
    }

    static func dropOutbox(_ db: Database, recordID: String) throws {
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE record_id = ?").execute(arguments: [recordID])
    }

    static func dropOutbox(_ db: Database, versionID: String) throws {
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE version_id = ?").execute(arguments: [versionID])
    }

    // MARK: Outbox

    /// The oldest queued versions after outbox position `after`: each with its position, its envelope,
    /// and the envelope's stored JSON (sent as it is, not encoded again).
    func outbox(after: Int64 = 0, limit: Int) throws -> [OutboxItem] {
        try queue.read { db in
            try Row.fetchAll(db, sql: "SELECT seq, version_id, envelope FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?", arguments: [after, limit]).map {
                let json: Data = $0["envelope"]
                return OutboxItem(position: $0["seq"], versionID: $0["version_id"], envelope: try Self.decoder.decode(Envelope.self, from: json), json: json)
            }
        }
    }

    func outboxCount() throws -> Int {
        try queue.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox") ?? 0 }
    }

    // MARK: Meta

    static func meta(_ db: Database, _ key: String) throws -> String? {
        try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = ?", arguments: [key])
    }

    static func setMeta(_ db: Database, _ key: String, _ value: String) throws {
        try db.execute(sql: "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", arguments: [key, value])
    }

    static func clock(_ db: Database, deviceID: String) throws -> HybridLogicalClock {
        if let text = try meta(db, "hlc"), let c = try? JSONDecoder().decode(HybridLogicalClock.self, from: Data(text.utf8)), c.deviceID == deviceID {
            var clock = c
            clock.maxForwardDriftMs = SyncPolicy.maxForwardDriftMs
            return clock
        }
        return HybridLogicalClock(deviceID: deviceID, maxForwardDriftMs: SyncPolicy.maxForwardDriftMs)
    }

    static func save(_ db: Database, clock: HybridLogicalClock) throws {
        try setMeta(db, "hlc", String(decoding: try encoder.encode(clock), as: UTF8.self))
    }

    func cursor() throws -> UInt64 {
        try queue.read { db in try Self.meta(db, "cursor").flatMap(UInt64.init) ?? 0 }
    }
}

/// Client-side sync limits.
/// One queued version: its outbox position, the envelope and the JSON it is stored (and sent) as.
struct OutboxItem: Sendable {
    var position: Int64
    var versionID: String
    var envelope: Envelope
    var json: Data
}

public enum SyncPolicy {
    /// How far ahead of this device's clock a pulled timestamp may be: the server's bound plus an hour
    /// of slack for this device's own clock error.
    public static let maxForwardDriftMs: UInt64 = 13 * 3_600 * 1_000
    /// Envelopes per push.
    public static let pushBatch = 500
    /// Changes per pull page.
    public static let pullPage = 1_000
}
