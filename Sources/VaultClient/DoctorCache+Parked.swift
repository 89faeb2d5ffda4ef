import Foundation
import GRDB
import VaultCore

/// A first read's records held pending with their envelopes parked among the heads (Docs/commitment-pages.md
/// §8): when a doctor's cache holds nothing of a patient, the pages of a pull written pending keep their
/// envelopes in `shared_records`, where they would go once authenticated, and only what the fold needs in
/// `pending_records` (an empty envelope there). A row of `parked_reads` names the patient and the share;
/// while it is there, every head the cache holds of that patient is such a parked envelope, never shown
/// (`liveEnvelopes`) and never read as a head (every writer of heads first moves them back to
/// `pending_records`, `unpark`, except the transaction that authenticates them). When the final page's
/// commitment vouches for them, that transaction drops the pending rows and the mark, and the envelopes are
/// heads where they lie: a large first read writes each envelope once, not once pending and again as a head.
extension DoctorCache {
    static let parkedTable = DeviceDatabase.Migration(
        "v10-doctor-parked-reads",
        sql: "CREATE TABLE parked_reads (owner_id TEXT NOT NULL PRIMARY KEY, tresor_id TEXT NOT NULL);"
    )

    /// The share whose first read the cache holds parked for `owner`, if any.
    static func parkedTresor(_ db: Database, owner: String) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: "SELECT tresor_id FROM parked_reads WHERE owner_id = ?"), arguments: [owner])
    }

    /// Whether a page of the share written pending now may park its envelopes: the share's first read is
    /// parked already, or the cache holds nothing of the patient (no head, nothing pending, nothing parked).
    static func mayPark(_ db: Database, owner: String, tresor: String) throws -> Bool {
        if let parked = try parkedTresor(db, owner: owner) { return parked == tresor }
        let anything = """
            SELECT EXISTS (SELECT 1 FROM shared_records WHERE owner_id = ?) OR EXISTS (SELECT 1 FROM pending_records WHERE owner_id = ?)
            """
        return try !(Bool.fetchOne(db, sql: anything, arguments: [owner, owner]) ?? true)
    }

    /// Whether `entries` can be parked among the owner's heads: no two share a record, and none has a row
    /// there already (a record pulled twice, or parked by an earlier pull of this read).
    static func canPark(_ db: Database, owner: String, _ entries: [Entry]) throws -> Bool {
        var records = Set<String>()
        let exists = try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM shared_records WHERE owner_id = ? AND record_id = ?)")
        for entry in entries {
            let rid = entry.header.recordID.hex
            guard records.insert(rid).inserted, try !(Bool.fetchOne(exists, arguments: [owner, rid]) ?? true) else { return false }
        }
        return true
    }

    /// Parks `entries` (every check but the signature passed) of the share: each envelope among the heads,
    /// its record pending with an empty envelope, and the mark. The caller checked `mayPark` and `canPark`.
    static func park(_ db: Database, owner: String, tresor: String, _ entries: [Entry]) throws {
        try db.execute(sql: "INSERT OR IGNORE INTO parked_reads (owner_id, tresor_id) VALUES (?, ?)", arguments: [owner, tresor])
        let head = try db.cachedStatement(
            sql: """
                INSERT INTO shared_records (owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope, version_id)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
        )
        let pending = try db.cachedStatement(
            sql: """
                INSERT OR REPLACE INTO pending_records
                    (owner_id, tresor_id, sequence, record_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, X'')
                """
        )
        for entry in entries {
            let t = entry.header.timestamp
            let rid = entry.header.recordID.hex
            let (physical, counter) = (Int64(clamping: t.physicalMs), Int64(t.counter))
            try head.execute(arguments: [owner, rid, tresor, physical, counter, t.deviceID, entry.header.deleted, entry.bytes, entry.versionID])
            try pending.execute(arguments: [
                owner, tresor, try storedCursor(entry.sequence), rid, entry.versionID, physical, counter, t.deviceID, entry.header.deleted,
            ])
        }
    }

    /// Moves the owner's parked first read, if any, back to `pending_records` (each envelope into its
    /// pending row, the parked heads and the mark gone): the records wait there as any record held pending.
    static func unpark(_ db: Database, owner: String) throws {
        guard let tresor = try parkedTresor(db, owner: owner) else { return }
        try db.execute(
            sql: """
                UPDATE pending_records SET envelope = (
                    SELECT s.envelope FROM shared_records s WHERE s.owner_id = pending_records.owner_id AND s.record_id = pending_records.record_id)
                WHERE owner_id = ? AND tresor_id = ? AND length(envelope) = 0
                """,
            arguments: [owner, tresor]
        )
        // Every head of the owner is parked while the mark stands (the cache held nothing of the owner when
        // it was set, and every other writer of heads moves them back first): those of the pending records go.
        try db.execute(
            sql: """
                DELETE FROM shared_records WHERE owner_id = ? AND record_id IN (
                    SELECT record_id FROM pending_records WHERE owner_id = ? AND tresor_id = ?)
                """,
            arguments: [owner, owner, tresor]
        )
        try db.execute(sql: "DELETE FROM parked_reads WHERE owner_id = ?", arguments: [owner])
    }

    /// Moves the owner's parked first read back to `pending_records` (`unpark`), in a transaction of its own.
    func unpark(owner: UUID) async throws {
        try await queue.write { db in try Self.unpark(db, owner: owner.uuidString) }
    }
}
