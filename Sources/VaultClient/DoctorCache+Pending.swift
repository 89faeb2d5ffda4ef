import Foundation
import GRDB
import VaultCore

/// The records of a pull held pending (Docs/commitment-pages.md §8): the pages before a pull's final one
/// pass every check but the signature and wait here, never shown, until the final page's commitment
/// either authenticates all of them at once or sends them to the per-record check.
extension DoctorCache {
    /// Added for pulls whose commitment authenticates every page: one row per change held pending, by
    /// share and change sequence, with the envelope as the server sent it.
    static let pendingTable = DeviceDatabase.Migration(
        "v9-doctor-pending-records",
        sql: """
            CREATE TABLE pending_records (
                owner_id TEXT NOT NULL,
                tresor_id TEXT NOT NULL,
                sequence INTEGER NOT NULL,
                envelope BLOB NOT NULL,
                PRIMARY KEY (owner_id, tresor_id, sequence));
            """
    )

    /// What a store does to the records held pending of its share.
    enum PendingStep: Sendable {
        /// Nothing.
        case none
        /// Stores every one of them first, in sequence order (a commitment authenticated them), returning
        /// them when `collect`.
        case promote(collect: Bool)
        /// Drops those at these sequences: the store carries them, checked one by one.
        case consumed([UInt64])
    }

    /// Holds the verified entries of a page pending, keeps its failed changes aside, and moves the
    /// share's cursor to `cursor`, in one transaction.
    func stage(_ pulled: [Pulled], owner: UUID, tresor: UUID, cursor: UInt64?) async throws {
        let next = try cursor.map(Self.storedCursor)
        let ownerID = owner.uuidString
        let tresorID = tresor.uuidString
        try await queue.write { db in
            let insert = try db.cachedStatement(
                sql: "INSERT OR REPLACE INTO pending_records (owner_id, tresor_id, sequence, envelope) VALUES (?, ?, ?, ?)"
            )
            let quarantine = QuarantineRows(db: db, feed: (ownerID, tresorID))
            for item in pulled {
                switch item {
                case let .verified(entry):
                    try insert.execute(arguments: [ownerID, tresorID, try Self.storedCursor(entry.sequence), entry.bytes])
                case let .failed(q): try quarantine.hold(q)
                }
            }
            if let next { try Self.saveCursor(db, owner: ownerID, tresor: tresorID, next) }
        }
    }

    /// Up to `limit` records held pending of the share, in sequence order.
    func pending(owner: UUID, tresor: UUID, limit: Int) async throws -> [Entry] {
        try await queue.read { db in
            var out: [Entry] = []
            try Self.eachPending(db, owner: owner.uuidString, tresor: tresor.uuidString, limit: limit) { out.append($0) }
            return out
        }
    }

    /// Whether the share holds records pending.
    func holdsPending(owner: UUID, tresor: UUID) async throws -> Bool {
        try await queue.read { db in
            try Bool.fetchOne(
                db,
                sql: "SELECT EXISTS (SELECT 1 FROM pending_records WHERE owner_id = ? AND tresor_id = ?)",
                arguments: [owner.uuidString, tresor.uuidString]
            ) ?? false
        }
    }

    /// Calls `body` with each record held pending of the share, in sequence order (at most `limit`).
    static func eachPending(_ db: Database, owner: String, tresor: String, limit: Int = .max, _ body: (Entry) throws -> Void) throws {
        let rows = try Row.fetchCursor(
            db,
            sql: "SELECT sequence, envelope FROM pending_records WHERE owner_id = ? AND tresor_id = ? ORDER BY sequence LIMIT ?",
            arguments: [owner, tresor, Int64(clamping: limit)]
        )
        while let row = try rows.next() {
            let bytes: Data = row[1]
            let env: Envelope
            do { env = try StoredEnvelope.decode(bytes) } catch { throw ClientError.integrity("the local cache holds an unreadable envelope") }
            try body(Entry(sequence: UInt64(max(0, row[0] as Int64)), header: env.header, versionID: env.versionID, bytes: bytes))
        }
    }

    /// Drops the records held pending of the share (those at `sequences` only, when given).
    static func dropPending(_ db: Database, owner: String, tresor: String, sequences: [UInt64]?) throws {
        guard let sequences else {
            try db.execute(sql: "DELETE FROM pending_records WHERE owner_id = ? AND tresor_id = ?", arguments: [owner, tresor])
            return
        }
        let delete = try db.cachedStatement(sql: "DELETE FROM pending_records WHERE owner_id = ? AND tresor_id = ? AND sequence = ?")
        for s in sequences { try delete.execute(arguments: [owner, tresor, try storedCursor(s)]) }
    }

    /// The heads of the share of `tresor` by `owner` as they would be with every record held pending and
    /// then every entry of `entries` stored (each one the head of its record), and the newest commitment
    /// accepted of it; nil when one of them would not become a head: its record appears twice among them
    /// (the earlier version would not be a head, so the digest would say nothing of it), it is older than
    /// the head held, or its record is held under another tresor. Writes nothing.
    func prospective(_ entries: [Entry], owner: UUID, tresor: UUID) async throws -> (set: HeadSet, accepted: StateCommitment?)? {
        let ownerID = owner.uuidString
        let tresorID = tresor.uuidString
        return try await queue.read { db in
            var (set, seen) = try Self.shareState(db, owner: ownerID, tresor: tresorID)
            var records = Set<String>()
            var fits = true
            let fold = { (entry: Entry) throws in
                guard fits else { return }
                let h = entry.header
                let cached = try CachedHead.read(db, owner: ownerID, recordID: h.recordID.hex)
                let older = cached?.timestamp.map { h.timestamp < $0 } ?? false
                guard records.insert(h.recordID.hex).inserted, cached?.tresorID ?? tresorID == tresorID, !older else {
                    fits = false
                    return
                }
                do { try set.replace(recordID: h.recordID.hex, old: cached?.head, with: entry.head) } catch { fits = false }
            }
            try Self.eachPending(db, owner: ownerID, tresor: tresorID, fold)
            for entry in entries { try fold(entry) }
            return fits ? (set, seen) : nil
        }
    }
}
