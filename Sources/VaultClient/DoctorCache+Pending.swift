import Foundation
import GRDB
import VaultCore

/// The records of a pull held pending (Docs/commitment-pages.md §8): the pages before a pull's final one
/// pass every check but the signature and wait here, never shown, until the final page's commitment
/// either authenticates all of them at once or sends them to the per-record check.
extension DoctorCache {
    /// Added for pulls whose commitment authenticates every page: one row per change held pending, by
    /// share and change sequence, with the envelope as the server sent it and what storing it as a head
    /// needs (record id, version id, HLC, tombstone), so that storing them all decodes nothing again.
    static let pendingTable = DeviceDatabase.Migration(
        "v9-doctor-pending-records",
        sql: """
            CREATE TABLE pending_records (
                owner_id TEXT NOT NULL,
                tresor_id TEXT NOT NULL,
                sequence INTEGER NOT NULL,
                record_id TEXT NOT NULL,
                version_id TEXT NOT NULL,
                hlc_physical INTEGER NOT NULL,
                hlc_counter INTEGER NOT NULL,
                hlc_device TEXT NOT NULL,
                deleted INTEGER NOT NULL,
                envelope BLOB NOT NULL,
                PRIMARY KEY (owner_id, tresor_id, sequence));
            """
    )

    /// Holds the verified entries of a page pending, keeps its failed changes aside, and moves the
    /// share's cursor to `cursor`, in one transaction. With `parking`, a first read of the patient parks
    /// them among the heads instead (`park`, DoctorCache+Parked.swift) when it can; otherwise a parked
    /// first read of the patient goes to `pending_records` before anything is written there.
    /// `added`, when given, is the sum of the head elements of `pulled`'s entries (for `park`).
    func stage(_ pulled: [Pulled], added: LtHash? = nil, owner: UUID, tresor: UUID, cursor: UInt64?, parking: Bool = false) async throws {
        let next = try cursor.map(Self.storedCursor)
        let ownerID = owner.uuidString
        let tresorID = tresor.uuidString
        try await queue.write { db in
            let entries = pulled.compactMap { if case let .verified(entry) = $0 { entry } else { nil } }
            let quarantine = QuarantineRows(db: db, feed: (ownerID, tresorID))
            for case let .failed(q) in pulled { try quarantine.hold(q) }
            if let next { try Self.saveCursor(db, owner: ownerID, tresor: tresorID, next) }
            guard !entries.isEmpty else { return }
            if parking, try Self.mayPark(db, owner: ownerID, tresor: tresorID, entries),
                try Self.park(db, owner: ownerID, tresor: tresorID, entries, added: added)
            {
                return
            }
            // Written pending: a parked first read of the patient goes there first.
            try Self.unpark(db, owner: ownerID)
            let insert = try db.cachedStatement(
                sql: """
                    INSERT OR REPLACE INTO pending_records
                        (owner_id, tresor_id, sequence, record_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """
            )
            for entry in entries {
                let t = entry.header.timestamp
                try insert.execute(arguments: [
                    ownerID, tresorID, try Self.storedCursor(entry.sequence), entry.header.recordID.hex, entry.versionID,
                    Int64(clamping: t.physicalMs), Int64(t.counter), t.deviceID, entry.header.deleted, entry.bytes,
                ])
            }
        }
    }

    /// Up to `limit` records held pending of the share, in sequence order, decoded.
    func pending(owner: UUID, tresor: UUID, limit: Int) async throws -> [Entry] {
        try await queue.read { db in
            var out: [Entry] = []
            try Self.eachPending(db, owner: owner.uuidString, tresor: tresor.uuidString, limit: limit) { out.append(try $0.entry()) }
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
    /// Without `envelopes`, each comes with empty `bytes` (the envelopes stay in the database).
    static func eachPending(
        _ db: Database,
        owner: String,
        tresor: String,
        limit: Int = .max,
        envelopes: Bool = true,
        _ body: (Head) throws -> Void
    ) throws {
        let envelope = envelopes ? "envelope" : "X''"
        // A parked first read of the share is held among the heads, and nothing of the owner is pending
        // (DoctorCache+Parked.swift); the fold needs no order, anything else reads in sequence order.
        let parked = try parkedTresor(db, owner: owner) == tresor
        let sql =
            parked
            ? """
            SELECT sequence, record_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, \(envelope) FROM shared_records
            WHERE owner_id = ? AND tresor_id = ? \(envelopes ? "ORDER BY sequence " : "")LIMIT ?
            """
            : """
            SELECT sequence, record_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, \(envelope) FROM pending_records
            WHERE owner_id = ? AND tresor_id = ? ORDER BY sequence LIMIT ?
            """
        let rows = try Row.fetchCursor(db, sql: sql, arguments: [owner, tresor, Int64(clamping: limit)])
        while let row = try rows.next() {
            guard let timestamp = LocalStore.timestamp(row[3], row[4], row[5]), let sequence = row[0] as Int64?, let versionID = row[2] as String?
            else {
                throw ClientError.localState("the local cache is damaged; remove it and view again")
            }
            try body(
                Head(
                    sequence: UInt64(max(0, sequence)),
                    recordID: row[1],
                    timestamp: timestamp,
                    deleted: row[6],
                    versionID: versionID,
                    bytes: row[7]
                )
            )
        }
    }

    /// Drops the records held pending of the share (those at `sequences` only, when given). When no other
    /// share holds any, the table is emptied whole: SQLite then frees its pages without visiting each row.
    static func dropPending(_ db: Database, owner: String, tresor: String, sequences: [UInt64]?) throws {
        guard let sequences else {
            // The first and the last share in key order (two lookups in the primary key, not a scan).
            let ends = try ["ASC", "DESC"].map { order in
                try Row.fetchOne(db, sql: "SELECT owner_id, tresor_id FROM pending_records ORDER BY owner_id \(order), tresor_id \(order) LIMIT 1")
                    .map { [$0[0] as String, $0[1] as String] }
            }
            if ends.allSatisfy({ $0 == nil || $0 == [owner, tresor] }) {
                try db.execute(sql: "DELETE FROM pending_records")
            } else {
                try db.execute(sql: "DELETE FROM pending_records WHERE owner_id = ? AND tresor_id = ?", arguments: [owner, tresor])
            }
            return
        }
        let delete = try db.cachedStatement(sql: "DELETE FROM pending_records WHERE owner_id = ? AND tresor_id = ? AND sequence = ?")
        for s in sequences { try delete.execute(arguments: [owner, tresor, try storedCursor(s)]) }
    }

    /// How many heads held pending a first read folds at once (`storeIfVouched`): enough for every core,
    /// few enough that their ids take little memory however large the read.
    static let foldBatch = 4_096

    /// Stores the records held pending of the share and then `entries` (a final page's, every check but
    /// the signature passed) as the heads of their records, in one transaction, in sequence order, when
    /// `shown` authenticates the heads that result (`CommitmentPages.vouches`; Docs/commitment-pages.md §8),
    /// dropping the pending rows and moving the cursor to `cursor`. Each must become the head of its record:
    /// it appears once among them, its record is held under no other tresor, and the head held is not
    /// newer; and the share must hold no quarantined record. Otherwise, or when `shown` does not
    /// authenticate the result, it writes nothing and returns nil. Returns the records held pending that
    /// it stored when `collect`. `added`, when given, is the sum of the head elements of `entries`
    /// (`LtHash.sum(ofHeads:)`, worked out on every core before the transaction): the transaction then
    /// folds only the records held pending and the heads that `entries` replace.
    func storeIfVouched(
        _ entries: [Entry],
        added: LtHash? = nil,
        shown: StateCommitment,
        patient: Certificate,
        tresor: UUID,
        category: String,
        cursor: UInt64?,
        collect: Bool
    ) async throws -> [Entry]? {
        let next = try cursor.map(Self.storedCursor)
        let ownerID = patient.userID.uuidString
        let tresorID = tresor.uuidString
        struct NotVouched: Error {}
        do {
            return try await queue.write { db in
                // A parked first read of this share stays where it is unless its records are to be collected.
                var heads = try HeadWriter(db: db, owner: ownerID, tresor: tresorID, keepParked: !collect)
                guard !heads.anyHeld else { throw NotVouched() }
                if let added { heads.set.hash.add(added) }
                var records = Set<String>()
                var promoted: [Entry] = []
                // A first read of the patient: no head to read, every record is new (each comes once). Every
                // head a parked read leaves among the heads is one of its records held pending.
                let parked = try Self.parkedTresor(db, owner: ownerID) == tresorID
                let anyHeld = "SELECT EXISTS (SELECT 1 FROM shared_records WHERE owner_id = ?)"
                let fresh = try parked || !(Bool.fetchOne(db, sql: anyHeld, arguments: [ownerID]) ?? true)
                let place = { (entry: Head, alreadyAdded: Bool) throws in
                    guard records.insert(entry.recordID).inserted, try heads.keepIfHead(entry, fresh: fresh, alreadyAdded: alreadyAdded) else {
                        throw NotVouched()
                    }
                }
                // A first read of the patient: the records held pending are folded without their envelopes
                // and copied in one statement once the commitment vouches for them, the bytes never leaving
                // the database (each is new and comes once, so none replaces another).
                // Their heads are folded a batch at a time, each batch's sum worked out on every core.
                let copyAtOnce = fresh && !collect
                var batch: [Head] = []
                let fold = {
                    do {
                        heads.set.hash.add(try LtHash.sumNow(ofHeads: batch.map { ($0.recordID, $0.versionID) }))
                        for head in batch { try heads.set.replace(recordID: head.recordID, old: nil, with: head.head, alreadyAdded: true) }
                    } catch { throw NotVouched() }
                    batch.removeAll(keepingCapacity: true)
                }
                // A parked first read over a share whose set holds nothing: its set was worked out as it was
                // parked, and the records it holds are each there once (the heads' key); none is read again.
                let parkedSet = parked && heads.set.live == 0 && heads.set.deleted == 0 ? try Self.parkedSet(db, owner: ownerID) : nil
                if let parkedSet {
                    heads.set.absorb(parkedSet)
                    for entry in entries where try CachedHead.read(db, owner: ownerID, recordID: entry.header.recordID.hex) != nil {
                        throw NotVouched()
                    }
                }
                if parkedSet == nil {
                    try Self.eachPending(db, owner: ownerID, tresor: tresorID, envelopes: !copyAtOnce) { head in
                        guard copyAtOnce else {
                            try place(head, false)
                            if collect { promoted.append(try head.entry()) }
                            return
                        }
                        guard records.insert(head.recordID).inserted else { throw NotVouched() }
                        batch.append(head)
                        if batch.count == Self.foldBatch { try fold() }
                    }
                    try fold()
                }
                for entry in entries { try place(entry.stored, added != nil) }
                // Parked, the owner's heads must be exactly the records folded (one more would stay a head
                // that no commitment covered), none held under another share (a record of the final page,
                // placed as new, could have replaced one).
                if parked {
                    let folded = records.count + (parkedSet.map { Int(clamping: $0.live &+ $0.deleted) } ?? 0)
                    let held = try Int.fetchOne(db, sql: "SELECT count(*) FROM shared_records WHERE owner_id = ?", arguments: [ownerID])
                    let elsewhere = "SELECT EXISTS (SELECT 1 FROM shared_records WHERE owner_id = ? AND tresor_id != ?)"
                    guard held == folded, try !(Bool.fetchOne(db, sql: elsewhere, arguments: [ownerID, tresorID]) ?? true) else {
                        throw NotVouched()
                    }
                }
                let accepted = heads.seen
                guard
                    CommitmentPages.vouches(shown, tresor: tresor, category: category, patient: patient, accepted: accepted, prospective: heads.set)
                else { throw NotVouched() }
                try heads.finish()
                if parked {
                    // Parked, the records already lie where the heads go: only the mark goes.
                    try db.execute(sql: "DELETE FROM parked_reads WHERE owner_id = ?", arguments: [ownerID])
                } else if copyAtOnce {
                    try db.execute(
                        sql: """
                            INSERT INTO shared_records (owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope, version_id)
                            SELECT owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope, version_id
                            FROM pending_records WHERE owner_id = ? AND tresor_id = ? ORDER BY sequence
                            """,
                        arguments: [ownerID, tresorID]
                    )
                }
                try Self.dropPending(db, owner: ownerID, tresor: tresorID, sequences: nil)
                if let next { try Self.saveCursor(db, owner: ownerID, tresor: tresorID, next) }
                return promoted
            }
        } catch is NotVouched {
            return nil
        }
    }
}

extension DoctorCache.Head {
    /// The entry, its envelope decoded (the cache wrote it, so a failure means a damaged cache).
    func entry() throws -> DoctorCache.Entry {
        let env: Envelope
        do { env = try StoredEnvelope.decode(bytes) } catch { throw ClientError.integrity("the local cache holds an unreadable envelope") }
        return DoctorCache.Entry(sequence: sequence, header: env.header, versionID: versionID, bytes: bytes)
    }
}
