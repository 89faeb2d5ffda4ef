import Foundation
import GRDB
import VaultCore
import VaultSQLite

/// A first read's records held pending, parked among the heads (Docs/commitment-pages.md §8): when a
/// doctor's cache holds nothing of a patient, the pages of a pull written pending go into
/// `shared_records`, where they would go once authenticated, each row with the change sequence it came at,
/// instead of into `pending_records`. A row of `parked_reads` names the patient, the share and the highest
/// sequence parked, with the set of the parked records' heads (LtHash, counts, newest HLC) worked out as
/// they were parked, so that authenticating them reads none of them again; while it is there, every head the cache holds of that patient is a parked record of
/// that share and nothing of the patient is pending. Such heads are never shown (`liveHeads`) and never
/// read as heads: every writer of heads first moves them to `pending_records` (`unpark`), except the
/// transaction that authenticates them, which folds them as it folds records held pending. When the final
/// page's commitment vouches for them, it drops the mark, and they are heads where they lie: a large first
/// read writes each envelope once, not once pending and again as a head.
extension DoctorCache {
    static let parkedTable = DeviceDatabase.Migration(
        "v10-doctor-parked-reads",
        sql: """
            CREATE TABLE parked_reads (
                owner_id TEXT NOT NULL PRIMARY KEY,
                tresor_id TEXT NOT NULL,
                through INTEGER NOT NULL,
                state BLOB NOT NULL,
                live INTEGER NOT NULL,
                deleted INTEGER NOT NULL,
                hlc_physical INTEGER NOT NULL,
                hlc_counter INTEGER NOT NULL,
                hlc_device TEXT NOT NULL,
                commitment BLOB);
            ALTER TABLE shared_records ADD COLUMN sequence INTEGER;
            """
    )

    /// The set of the heads of the owner's parked first read (nil when none is parked).
    static func parkedSet(_ db: Database, owner: String) throws -> HeadSet? {
        try parkedRead(db, owner: owner)?.set
    }

    /// The owner's parked first read, if any: the set of its heads and the highest sequence parked.
    private static func parkedRead(_ db: Database, owner: String) throws -> (set: HeadSet, through: Int64)? {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM parked_reads WHERE owner_id = ?", arguments: [owner]) else { return nil }
        guard let set = HeadSet(row: row), let through = row["through"] as Int64? else {
            throw ClientError.localState("the local cache is damaged; remove it and view again")
        }
        return (set, through)
    }

    /// Whether `entries` are large enough to begin a parked read: their envelopes average at least
    /// `parkingEnvelopeBytes` (the check, `SharedReplica.verifyAhead`, sums such a page for the parked set).
    static func largeEnoughToPark(_ entries: [Entry]) -> Bool {
        entries.reduce(0) { $0 + $1.bytes.count } >= entries.count * parkingEnvelopeBytes
    }

    /// The share whose first read the cache holds parked for `owner`, if any.
    static func parkedTresor(_ db: Database, owner: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT tresor_id FROM parked_reads WHERE owner_id = ?"), arguments: [owner])
    }

    /// The mean size of the envelopes of the page that begins a parked read, at least: 4 KiB. Parked, each
    /// record costs an insert into the heads' index in record id order at every page's commit, where a page
    /// written pending appends in sequence order; that costs more than the copy it saves when records are
    /// small (the 100,000-record read of 750-byte envelopes took 4.8-4.9 s parked against 4.2; 10,000 of
    /// 16 KiB, 1.0 s against 2.2; Docs/benchmarks.md §3). Tests set 0 to park every first read.
    @TaskLocal static var parkingEnvelopeBytes = 4_096

    /// Whether a page of the share written pending now (`entries`) may be parked: the share's first read is
    /// parked already, or the cache holds nothing of the patient (no head, nothing pending) and the page's
    /// envelopes are large enough (`parkingEnvelopeBytes`).
    static func mayPark(_ db: Database, owner: String, tresor: String, _ entries: [Entry]) throws -> Bool {
        if let parked = try parkedTresor(db, owner: owner) { return parked == tresor }
        guard largeEnoughToPark(entries) else { return false }
        let anything = """
            SELECT EXISTS (SELECT 1 FROM shared_records WHERE owner_id = ?) OR EXISTS (SELECT 1 FROM pending_records WHERE owner_id = ?)
            """
        return try !(Bool.fetchOne(db, sql: anything, arguments: [owner, owner]) ?? true)
    }

    /// Parks `entries` (every check but the signature passed) of the share among the heads, with their
    /// sequences, in a savepoint, and moves the mark's highest sequence. The caller checked `mayPark`.
    /// Parks nothing and returns false when one of them cannot be parked: a sequence not above every one
    /// parked before it (another process of this doctor pulling the same pages, which the server may have
    /// filled differently: they go pending, where the later rows replace the earlier, as they always did),
    /// or a record with a row among the heads already (a record pulled twice, in this page or an earlier one).
    /// `added`, when given, is the sum of the entries' head elements (`SharedPage.added`, worked out on every
    /// core as the page was checked): the parked set adds it once instead of each element.
    static func park(_ db: Database, owner: String, tresor: String, _ entries: [Entry], added: LtHash? = nil) throws -> Bool {
        // Bound through SQLite's C API: GRDB's argument arrays cost more than the inserts (Docs/benchmarks.md §3).
        let head = try SQLiteStep(
            db,
            sql: """
                INSERT INTO shared_records
                    (owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope, version_id, sequence)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
                """
        )
        defer { head.finish() }
        let before = try parkedRead(db, owner: owner)
        var last = before?.through ?? -1
        var set = before?.set ?? HeadSet()
        if let added { set.hash.add(added) }
        var parked = false
        try db.inSavepoint {
            for entry in entries {
                let sequence = try storedCursor(entry.sequence)
                guard sequence > last else { return .rollback }
                last = sequence
                let t = entry.header.timestamp
                try head.bind(
                    .text(owner),
                    .text(entry.header.recordID.hex),
                    .text(tresor),
                    .int(Int64(clamping: t.physicalMs)),
                    .int(Int64(t.counter)),
                    .text(t.deviceID),
                    .int(entry.header.deleted ? 1 : 0),
                    .data(entry.bytes),
                    .text(entry.versionID),
                    .int(sequence)
                )
                _ = try head.step()
                guard db.changesCount == 1 else { return .rollback }
                do { try set.replace(recordID: entry.header.recordID.hex, old: nil, with: entry.head, alreadyAdded: added != nil) } catch {
                    throw ClientError.integrity("the server sent a record with a malformed id")
                }
            }
            try HeadCopyRow.save(
                db,
                table: "parked_reads",
                key: [("owner_id", owner)],
                set: set,
                commitment: nil,
                extra: [("tresor_id", tresor), ("through", last)]
            )
            parked = true
            return .commit
        }
        return parked
    }

    /// Moves the owner's parked first read, if any, to `pending_records` (each head a pending row at its
    /// sequence, the heads and the mark gone): the records wait there as any record held pending.
    static func unpark(_ db: Database, owner: String) throws {
        guard let tresor = try parkedTresor(db, owner: owner) else { return }
        // Every head of the owner is a parked record of the share while the mark stands (the cache held
        // nothing of the owner when it was set, and every other writer of heads moves them first).
        let damaged = """
            SELECT EXISTS (SELECT 1 FROM shared_records WHERE owner_id = ? AND (sequence IS NULL OR version_id IS NULL OR tresor_id != ?))
            """
        guard try !(Bool.fetchOne(db, sql: damaged, arguments: [owner, tresor]) ?? true) else {
            throw ClientError.localState("the local cache is damaged; remove it and view again")
        }
        try db.execute(
            sql: """
                INSERT OR REPLACE INTO pending_records
                    (owner_id, tresor_id, sequence, record_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                SELECT owner_id, tresor_id, sequence, record_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope
                FROM shared_records WHERE owner_id = ? ORDER BY sequence
                """,
            arguments: [owner]
        )
        try db.execute(sql: "DELETE FROM shared_records WHERE owner_id = ?", arguments: [owner])
        try db.execute(sql: "DELETE FROM parked_reads WHERE owner_id = ?", arguments: [owner])
    }

    /// Moves the owner's parked first read to `pending_records` (`unpark`), in a transaction of its own.
    func unpark(owner: UUID) async throws {
        try await queue.write { db in try Self.unpark(db, owner: owner.uuidString) }
    }
}

extension HeadSet {
    /// Adds the heads of `other`, records this set does not hold (the parked first read of a share whose
    /// set holds nothing): the set the fold of both gives, as the lanes of the LtHash add in any order.
    mutating func absorb(_ other: HeadSet) {
        hash.add(other.hash)
        live &+= other.live
        deleted &+= other.deleted
        if newest < other.newest { newest = other.newest }
    }
}
