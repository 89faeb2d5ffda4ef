import Foundation
import GRDB
import VaultCore
import VaultSQLite

extension DoctorCache {
    /// What storing a record as the head of its record needs: its change sequence, record id (hex), HLC,
    /// whether it is a tombstone, its version id and the envelope as kept.
    struct Head: Sendable {
        var sequence: UInt64
        var recordID: String
        var timestamp: HLCTimestamp
        var deleted: Bool
        var versionID: String
        var bytes: Data

        /// The head this makes of its record in the set of heads.
        var head: HeadSet.Head { HeadSet.Head(versionID: versionID, deleted: deleted, timestamp: timestamp) }
    }

    /// The writes of one store transaction to one share's heads: each verified entry replaces the head
    /// held for its record (a replay goes aside instead), the set of heads follows, and the quarantine
    /// heals; `finish` saves the set.
    struct HeadWriter {
        let db: Database
        let owner: String
        let tresor: String
        let quarantine: QuarantineRows
        let upsert: SQLiteStep
        let before: HeadSet
        let seen: StateCommitment?
        var set: HeadSet
        /// Most of the time nothing is held, and a verified change has nothing to heal.
        var anyHeld: Bool

        /// A parked first read of the owner (DoctorCache+Parked.swift) goes back to `pending_records` first,
        /// so that no parked envelope is read as a head; with `keepParked`, one of this share stays parked
        /// (the transaction that would authenticate it).
        init(db: Database, owner: String, tresor: String, keepParked: Bool = false) throws {
            if try !keepParked || DoctorCache.parkedTresor(db, owner: owner) != tresor { try DoctorCache.unpark(db, owner: owner) }
            self.db = db
            self.owner = owner
            self.tresor = tresor
            quarantine = QuarantineRows(db: db, feed: (owner, tresor))
            upsert = try SQLiteStep(
                db,
                sql: """
                    INSERT INTO shared_records (owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope, version_id)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (owner_id, record_id) DO UPDATE SET tresor_id = excluded.tresor_id, hlc_physical = excluded.hlc_physical,
                        hlc_counter = excluded.hlc_counter, hlc_device = excluded.hlc_device, deleted = excluded.deleted,
                        envelope = excluded.envelope, version_id = excluded.version_id
                    """
            )
            anyHeld = try quarantine.holdsAny()
            (before, seen) = try DoctorCache.shareState(db, owner: owner, tresor: tresor)
            set = before
        }

        mutating func hold(_ q: QuarantinedRecord) throws {
            try quarantine.hold(q)
            anyHeld = true
        }

        mutating func keep(_ entry: Head) throws {
            let cached = try CachedHead.read(db, owner: owner, recordID: entry.recordID)
            if let held = cached?.timestamp, entry.timestamp < held {
                try hold(QuarantinedRecord(sequence: entry.sequence, recordID: entry.recordID, versionID: entry.versionID, reason: .replayed))
                return
            }
            try write(entry, over: cached)
        }

        /// Stores `entry` as the head of its record when it becomes one: the record is held under no other
        /// tresor and its head held is not newer. Returns false, writing nothing, otherwise. With `fresh`
        /// the caller knows that the cache holds no record of the owner but those this writer stored, and
        /// that no record comes twice, so there is no head to read. With `alreadyAdded`, the entry's head
        /// element was added to the set beforehand (`HeadSet.replace`).
        mutating func keepIfHead(_ entry: Head, fresh: Bool = false, alreadyAdded: Bool = false) throws -> Bool {
            let cached = fresh ? nil : try CachedHead.read(db, owner: owner, recordID: entry.recordID)
            if let held = cached?.timestamp, entry.timestamp < held { return false }
            guard cached?.tresorID ?? tresor == tresor else { return false }
            try write(entry, over: cached, alreadyAdded: alreadyAdded)
            return true
        }

        private mutating func write(_ entry: Head, over cached: CachedHead?, alreadyAdded: Bool = false) throws {
            do {
                try set.replace(recordID: entry.recordID, old: cached?.head, with: entry.head, alreadyAdded: alreadyAdded)
            } catch {
                throw ClientError.integrity("the server sent a record with a malformed id")
            }
            let t = entry.timestamp
            // Bound through SQLite's C API: GRDB's argument arrays cost more than the insert (Docs/benchmarks.md §3).
            try upsert.bind(
                .text(owner),
                .text(entry.recordID),
                .text(tresor),
                .int(Int64(clamping: t.physicalMs)),
                .int(Int64(t.counter)),
                .text(t.deviceID),
                .int(entry.deleted ? 1 : 0),
                .data(entry.bytes),
                .text(entry.versionID)
            )
            _ = try upsert.step()
            upsert.finish()
            if anyHeld {
                try quarantine.release(sequence: entry.sequence)
                try quarantine.release(recordID: entry.recordID)
            }
        }

        func finish() throws {
            if set != before { try DoctorCache.saveShareState(db, owner: owner, tresor: tresor, set, seen) }
        }
    }
}
