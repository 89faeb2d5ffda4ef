import Foundation
import GRDB
import VaultCore

/// One record's local head: its envelope (the same ciphertext the server holds) and what the server
/// last showed of it, so a server that replays an older version is caught.
struct LocalRecordRow: Sendable {
    var envelope: Envelope
    var serverTimestamp: HLCTimestamp?
    /// Whether a version of this record waits in the outbox.
    var pending: Bool

    var recordType: RecordType { envelope.header.recordType }
    var category: String { envelope.header.category }
    var timestamp: HLCTimestamp { envelope.header.timestamp }
    var deleted: Bool { envelope.header.deleted }
}

/// One queued version: its outbox position, the envelope and the binary encoding it is stored (and sent) as.
struct OutboxItem: Sendable {
    var position: Int64
    var versionID: String
    var envelope: Envelope
    var bytes: Data
}

/// The device's local database (GRDB): envelopes of the owner's records, the outbox, the pull cursor
/// and the HLC state, with versioned migrations. Data at rest stays encrypted: reads decrypt in memory.
/// Every statement on it lives here; writes that must land together go through `write(_:)`, so a crash
/// at any point loses nothing and duplicates nothing (Docs/design.md §5).
final class LocalStore: Sendable {
    let queue: DatabaseQueue
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        return e
    }()
    /// Shared: a decoder is configured once and never changed, so decoding from several threads is safe.
    static let decoder = JSONDecoder()

    init(url: URL) throws {
        queue = try DeviceDatabase.open(at: url, configuration: DeviceDatabase.walConfiguration(), migrations: DeviceDatabase.patient)
    }

    /// The first schema: records, outbox, refused versions and the device's own values (cursor, clock).
    static let firstSchema = DeviceDatabase.Migration(
        "v1-local",
        sql: """
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
            """
    )

    /// Envelopes kept in the binary encoding (Docs/envelope-v1.md §7.1) instead of JSON: a store written
    /// before is converted once, when it opens.
    static let binaryEnvelopes = JSONEraConversion.envelopes("v5-binary-envelopes", tables: ["records", "outbox"])

    /// Accepted state commitments kept in their binary form (Docs/envelope-v1.md §3.4) instead of JSON, as
    /// stores before it kept some: converted once, when the store opens; nothing is read as JSON after it.
    static let binaryCommitments = JSONEraConversion.commitments("v7-binary-commitments", table: "server_state")

    /// Records from the server kept aside (Docs/design.md §5), added after the first schema: one row per
    /// change sequence, never applied, fetched again by every sync.
    static let quarantineTable = DeviceDatabase.Migration(
        "v2-quarantine",
        sql: """
            CREATE TABLE quarantine (
                sequence INTEGER PRIMARY KEY,
                record_id TEXT,
                version_id TEXT,
                reason TEXT NOT NULL);
            CREATE INDEX quarantine_record ON quarantine (record_id);
            """
    )

    // MARK: Reads

    static let selectRecord = """
        SELECT r.envelope, r.server_physical, r.server_counter, r.server_device,
            EXISTS (SELECT 1 FROM outbox o WHERE o.record_id = r.record_id) AS pending
        FROM records r
        """

    static func row(_ r: Row) throws -> LocalRecordRow {
        LocalRecordRow(
            envelope: try StoredEnvelope.decode(r["envelope"] as Data),
            serverTimestamp: timestamp(r["server_physical"], r["server_counter"], r["server_device"]),
            pending: (r["pending"] as Int64? ?? 0) != 0
        )
    }

    /// A timestamp from its three columns, or nil when any is NULL or out of range (a damaged file).
    static func timestamp(_ physical: Int64?, _ counter: Int64?, _ device: String?) -> HLCTimestamp? {
        guard let physical, let counter, let device, let p = UInt64(exactly: physical), let c = UInt32(exactly: counter) else { return nil }
        return HLCTimestamp(physicalMs: p, counter: c, deviceID: device)
    }

    /// Local heads, optionally of one category and one record type.
    func records(category: String? = nil, type: RecordType? = nil) throws -> [LocalRecordRow] {
        try queue.read { db in
            var sql = Self.selectRecord + " WHERE 1 = 1"
            var args: [any DatabaseValueConvertible] = []
            if let category {
                sql += " AND r.category = ?"
                args.append(category)
            }
            if let type {
                sql += " AND r.record_type = ?"
                args.append(type.rawValue)
            }
            return try Row.fetchAll(db, sql: sql, arguments: StatementArguments(args)).map(Self.row)
        }
    }

    /// One record's local head, if the device holds it.
    func record(_ id: RecordID) throws -> LocalRecordRow? {
        try queue.read { db in try Transaction(db: db).record(id.hex) }
    }

    /// The oldest queued versions after outbox position `after`: each with its position, its envelope,
    /// and the envelope's stored binary encoding (sent as it is, not encoded again).
    func outbox(after: Int64 = 0, limit: Int) throws -> [OutboxItem] {
        try queue.read { db in
            let sql = "SELECT seq, version_id, envelope FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?"
            return try Row.fetchAll(db.cachedStatement(sql: sql), arguments: [after, limit]).map {
                let bytes: Data = $0["envelope"]
                return OutboxItem(position: $0["seq"], versionID: $0["version_id"], envelope: try StoredEnvelope.decode(bytes), bytes: bytes)
            }
        }
    }

    /// How many versions wait for the server.
    func outboxCount() throws -> Int {
        try queue.read { db in try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM outbox")) ?? 0 }
    }

    /// `outboxCount` read on the database's own queue: the task waits there, not a thread of the pool,
    /// while a sync's write holds the database.
    func outboxCountWaiting() async throws -> Int {
        try await queue.read { db in try Int.fetchOne(db.cachedStatement(sql: "SELECT COUNT(*) FROM outbox")) ?? 0 }
    }

    /// The reasons the server gave for the versions it refused, oldest first.
    func rejections() throws -> [String] {
        try queue.read { db in try String.fetchAll(db, sql: "SELECT reason FROM rejected ORDER BY at, version_id") }
    }

    /// The pull cursor: the last change sequence applied.
    func cursor() throws -> UInt64 {
        try queue.read { db in try Transaction(db: db).cursor() }
    }

    /// The quarantined records, by sequence.
    func quarantined() throws -> [QuarantinedRecord] {
        try queue.read { db in try QuarantineRows(db: db, feed: nil).all() }
    }

    // MARK: Transactions

    /// Runs `body` in one write transaction: everything it does lands together, or nothing does when it throws.
    func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        try queue.write { db in try body(Transaction(db: db)) }
    }

    /// Runs `body` in one read transaction (a consistent view; `body` must not write).
    func read<T>(_ body: (Transaction) throws -> T) throws -> T {
        try queue.read { db in try body(Transaction(db: db)) }
    }

    /// Like `write(_:)`, with the device's hybrid logical clock loaded first and saved with the rest.
    func write<T>(deviceID: String, _ body: (Transaction, inout HybridLogicalClock) throws -> T) throws -> T {
        try write { tx in
            var clock = try tx.clock(deviceID: deviceID)
            let result = try body(tx, &clock)
            try tx.save(clock: clock)
            return result
        }
    }

    /// The operations of one write transaction of the local store.
    struct Transaction {
        let db: Database

        /// One record's local head.
        func record(_ recordID: String) throws -> LocalRecordRow? {
            try Row.fetchOne(db.cachedStatement(sql: selectRecord + " WHERE r.record_id = ?"), arguments: [recordID]).map(LocalStore.row)
        }

        /// Writes a record's new local head (and, when `outbox` is set, queues it for push). A newer local
        /// version replaces an older unsent one for the same record.
        func put(_ env: Envelope, outbox: Bool, serverTimestamp: HLCTimestamp? = nil) throws {
            let h = env.header
            let bytes = StoredEnvelope.encode(env)
            // Cached statements: compiled once per connection, not once per record.
            try db.cachedStatement(
                sql: """
                    INSERT INTO records (record_id, record_type, tresor_id, category, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (record_id) DO UPDATE SET record_type = excluded.record_type, tresor_id = excluded.tresor_id,
                        category = excluded.category, hlc_physical = excluded.hlc_physical, hlc_counter = excluded.hlc_counter,
                        hlc_device = excluded.hlc_device, deleted = excluded.deleted, envelope = excluded.envelope
                    """
            ).execute(arguments: [
                h.recordID.hex, h.recordType.rawValue, h.tresorID.uuidString, h.category,
                Int64(clamping: h.timestamp.physicalMs), Int64(h.timestamp.counter), h.timestamp.deviceID, h.deleted, bytes,
            ])
            if let serverTimestamp { try setServerTimestamp(h.recordID.hex, serverTimestamp) }
            if outbox {
                try dropOutbox(recordID: h.recordID.hex)
                try db.cachedStatement(sql: "INSERT INTO outbox (version_id, record_id, envelope) VALUES (?, ?, ?)")
                    .execute(arguments: [env.versionID, h.recordID.hex, bytes])
            }
        }

        /// Remembers the newest version the server has shown for a record.
        private func setServerTimestamp(_ recordID: String, _ t: HLCTimestamp) throws {
            try db.cachedStatement(sql: "UPDATE records SET server_physical = ?, server_counter = ?, server_device = ? WHERE record_id = ?")
                .execute(arguments: [Int64(clamping: t.physicalMs), Int64(t.counter), t.deviceID, recordID])
        }

        /// Remembers `t` as the server's version of a record the device holds, unless it showed a newer one.
        func advanceServerTimestamp(_ recordID: String, _ t: HLCTimestamp) throws {
            // Only the three columns: no envelope is read or decoded.
            let statement = try db.cachedStatement(sql: "SELECT server_physical, server_counter, server_device FROM records WHERE record_id = ?")
            guard let r = try Row.fetchOne(statement, arguments: [recordID]) else { return }
            if let seen = timestamp(r[0], r[1], r[2]), seen >= t { return }
            try setServerTimestamp(recordID, t)
        }

        /// Drops the queued version of a record, if any.
        func dropOutbox(recordID: String) throws {
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE record_id = ?").execute(arguments: [recordID])
        }

        /// The server refused a pushed version: it leaves the outbox and its reason is kept.
        func reject(_ item: OutboxItem, reason: String, at: Int64) throws {
            try db.execute(
                sql: "INSERT OR REPLACE INTO rejected (version_id, record_id, reason, at) VALUES (?, ?, ?, ?)",
                arguments: [item.versionID, item.envelope.header.recordID.hex, reason, at]
            )
            try dropOutbox(versionID: item.versionID)
        }

        /// Pushed versions the server stored or already had leave the outbox.
        func dropOutbox(versionIDs: [String]) throws {
            let list = String(decoding: try JSONEncoder().encode(versionIDs), as: UTF8.self)
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE version_id IN (SELECT value FROM json_each(?))").execute(arguments: [list])
        }

        /// The server refused a pushed version: it leaves the outbox.
        private func dropOutbox(versionID: String) throws {
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE version_id = ?").execute(arguments: [versionID])
        }

        /// The pull cursor: the last change sequence applied.
        func cursor() throws -> UInt64 {
            try meta("cursor").flatMap(UInt64.init) ?? 0
        }

        /// The quarantine of this store's one feed.
        var quarantine: QuarantineRows { QuarantineRows(db: db, feed: nil) }

        /// Advances the pull cursor.
        func setCursor(_ cursor: UInt64) throws {
            try setMeta("cursor", String(cursor))
        }

        /// The device's saved clock (a fresh one for a new device, or after the device id changed).
        func clock(deviceID: String) throws -> HybridLogicalClock {
            if let text = try meta("hlc"), var clock = try? decoder.decode(HybridLogicalClock.self, from: Data(text.utf8)),
                clock.deviceID == deviceID
            {
                clock.maxForwardDriftMs = SyncPolicy.maxForwardDriftMs
                return clock
            }
            return HybridLogicalClock(deviceID: deviceID, maxForwardDriftMs: SyncPolicy.maxForwardDriftMs)
        }

        /// Saves the device's clock.
        func save(clock: HybridLogicalClock) throws {
            try setMeta("hlc", String(decoding: try encoder.encode(clock), as: UTF8.self))
        }

        private func meta(_ key: String) throws -> String? {
            try String.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE key = ?"), arguments: [key])
        }

        private func setMeta(_ key: String, _ value: String) throws {
            try db.cachedStatement(sql: "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
                .execute(arguments: [key, value])
        }
    }
}

extension QuarantinedRecord {
    /// A row of a quarantine table (`sequence, record_id, version_id, reason`).
    init(row: Row) {
        self.init(
            sequence: UInt64(clamping: row["sequence"] as Int64),
            recordID: row["record_id"],
            versionID: row["version_id"],
            // A reason this version does not know (written by a newer one) still counts as a failure.
            reason: QuarantineReason(rawValue: row["reason"]) ?? .malformed
        )
    }
}

/// Client-side sync limits.
public enum SyncPolicy {
    /// How far ahead of this device's clock a pulled timestamp may be: the server's bound plus an hour
    /// of slack for this device's own clock error.
    public static let maxForwardDriftMs: UInt64 = 13 * 3_600 * 1_000
    /// Envelopes per push.
    public static let pushBatch = 500
    /// Changes per pull page.
    public static let pullPage = 1_000
    /// How often a push refused because another device committed first is pulled, recomputed and sent again.
    public static let staleCommitmentRetries = 4
}
