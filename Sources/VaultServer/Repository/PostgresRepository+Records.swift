import Foundation
import NIOCore
import PostgresNIO
import VaultCore

/// Append-only versions, last-writer-wins heads and per-owner change sequences (Docs/design.md §5).
extension PostgresRepository: SQLRecordReads {
    /// A stored head and the record it belongs to.
    private struct HeadRecord: StoredRowDecodable {
        var recordID: String
        var tresorID: UUID
        var versionID: String
        var key: HeadKey

        init(stored r: some StoredRow) throws {
            recordID = try r.string("record_id")
            tresorID = try r.uuid("tresor_id")
            versionID = try r.string("version_id")
            key = try HeadKey(stored: r)
        }
    }

    /// Stores the whole push once every chunk is checked (`streamsPushes` is false): storing chunk by
    /// chunk while the rest were checked cost round trips per chunk and measured no faster here
    /// (Docs/benchmarks.md §2). Under the owner's lock: the heads the batch touches, one INSERT of the
    /// versions, one INSERT of new heads and one UPDATE of replaced ones.
    public func storeVersions(ownerID: UUID, _ chunks: VersionChunks, commitments: [CommitmentRow]) async throws -> [StoreOutcome] {
        let versions = try await chunks.rest()
        guard !versions.isEmpty || !commitments.isEmpty else { return [] }
        let now = Date().unixMillis
        return try await transaction { conn in
            let logger = self.logger
            try await conn.query(
                "INSERT INTO owner_sequences (owner_id, last_sequence) VALUES (\(ownerID), 0) ON CONFLICT DO NOTHING",
                logger: logger
            )
            // No row: the account is gone, deleted before this push or while it waited for the lock (the row
            // was inserted above, so only a deletion removes it). Nothing is stored for an account that is gone.
            var locked: Int64?
            for try await v in try await conn.query(
                """
                SELECT last_sequence FROM owner_sequences
                WHERE owner_id = \(ownerID) AND EXISTS (SELECT 1 FROM users WHERE id = \(ownerID)) FOR UPDATE
                """,
                logger: logger
            ).decode(Int64.self) { locked = v }
            guard var last = locked else { throw RepositoryError.notFound("account") }
            let start = last
            // Under the owner's lock, so two pushes to one tresor are serialised; a stale one throws and rolls back.
            try await RecordSQL.replaceCommitments(PostgresSQL(connection: conn, logger: logger), owner: ownerID, commitments, now: now)
            let sql = PostgresSQL(connection: conn, logger: logger)
            // Each tresor's head state, updated for every head written (Docs/commitment-pages.md §5).
            var fold = TresorStateFold()
            for t in Set(versions.map(\.tresorID)).union(commitments.filter { $0.expected != nil }.map(\.tresorID)) {
                fold.hold(t, try await sql.row(TresorState.self, TresorStateSQL.load(owner: ownerID, tresorID: t))?.set)
            }
            guard !versions.isEmpty else {
                try fold.check(commitments)
                return []
            }

            // The heads first, under the owner's lock: a record stays in the tresor it was first written to
            // (the first version of a new record places it), so two pushes at once cannot place one record
            // in two tresors.
            let recordIDs = Array(Set(versions.map(\.recordID)))
            let stored = try await self.all(
                HeadRecord.self,
                """
                SELECT record_id, tresor_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted FROM heads
                WHERE owner_id = \(ownerID) AND record_id = ANY(\(recordIDs))
                """,
                on: conn
            )
            var heads = Dictionary(stored.map { ($0.recordID, $0.key) }, uniquingKeysWith: { first, _ in first })
            var headVersions = Dictionary(stored.map { ($0.recordID, $0.versionID) }, uniquingKeysWith: { first, _ in first })
            var placed = Dictionary(stored.map { ($0.recordID, $0.tresorID) }, uniquingKeysWith: { first, _ in first })
            let misplaced = versions.map { v in
                if let t = placed[v.recordID] { return t != v.tresorID }
                placed[v.recordID] = v.tresorID
                return false
            }
            let inserted = try await self.insertVersions(conn, owner: ownerID, zip(versions, misplaced).filter { !$1 }.map(\.0))

            var outcomes: [StoreOutcome] = []
            var winners: [String: (VersionRow, Int64)] = [:]
            var seen = Set<String>()
            for (v, misplaced) in zip(versions, misplaced) {
                guard !misplaced else {
                    outcomes.append(.misplaced)
                    continue
                }
                guard inserted.contains(v.versionID), seen.insert(v.versionID).inserted else {
                    outcomes.append(.duplicate)
                    continue
                }
                if let head = heads[v.recordID], !v.wins(over: head) {
                    outcomes.append(.stored(sequence: nil))
                    continue
                }
                last = try StoredNumberOutOfRange.successor(of: last, "the change sequence")
                try fold.replace(v, old: heads[v.recordID].flatMap { h in headVersions[v.recordID].map { ($0, h.deleted) } })
                headVersions[v.recordID] = v.versionID
                heads[v.recordID] = HeadKey(hlcPhysical: v.hlcPhysical, hlcCounter: v.hlcCounter, hlcDevice: v.hlcDevice, deleted: v.deleted)
                winners[v.recordID] = (v, last)
                outcomes.append(.stored(sequence: UInt64(last)))
            }
            // The commitments that check their batch, against the state it leaves; a mismatch rolls back.
            try fold.check(commitments)
            try await self.writeHeads(conn, owner: ownerID, Array(winners.values), existing: Set(stored.map(\.recordID)), now: now)
            for (tresor, state) in fold.changedStates { try await sql.execute(TresorStateSQL.put(owner: ownerID, tresorID: tresor, state)) }
            if last != start {
                try await conn.query("UPDATE owner_sequences SET last_sequence = \(last) WHERE owner_id = \(ownerID)", logger: logger)
            }
            return outcomes
        }
    }

    /// Inserts `versions` and returns the ids that were new. A batch's ids are all new unless a push is
    /// retried or repeats an id, so a plain INSERT is tried first under a savepoint; only a unique
    /// violation falls back to the slower `ON CONFLICT DO NOTHING` (Docs/benchmarks.md §2).
    private func insertVersions(_ conn: PostgresConnection, owner: UUID, _ versions: [VersionRow]) async throws -> Set<String> {
        guard !versions.isEmpty else { return [] }
        try await conn.query("SAVEPOINT new_versions", logger: logger)
        do {
            try await conn.query(Self.insertVersions(owner: owner, versions, skippingKnown: false), logger: logger)
            return Set(versions.map(\.versionID))
        } catch  where Self.isUniqueViolation(error) {
            try await conn.query("ROLLBACK TO SAVEPOINT new_versions", logger: logger)
        }
        var inserted = Set<String>()
        let rows = try await conn.query(Self.insertVersions(owner: owner, versions, skippingKnown: true), logger: logger)
        for try await id in rows.decode(String.self) { inserted.insert(id) }
        return inserted
    }

    /// One round trip inserting every version; `skippingKnown` skips ids already stored and returns the new ones.
    private static func insertVersions(owner: UUID, _ v: [VersionRow], skippingKnown: Bool) -> PostgresQuery {
        """
        INSERT INTO versions (version_id, owner_id, record_id, tresor_id, epoch, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
        SELECT v.id, \(owner), v.rid, v.tid, v.epoch, v.phys, v.ctr, v.dev, v.del, v.env
        FROM unnest(\(v.map(\.versionID)), \(v.map(\.recordID)), \(v.map(\.tresorID)), \(v.map { Int64($0.epoch) }),
                    \(v.map(\.hlcPhysical)), \(v.map(\.hlcCounter)), \(v.map(\.hlcDevice)), \(v.map(\.deleted)),
                    \(v.map { ByteBuffer(bytes: $0.envelope) }))
             AS v(id, rid, tid, epoch, phys, ctr, dev, del, env)
        \(unescaped: skippingKnown ? "ON CONFLICT (version_id) DO NOTHING RETURNING version_id" : "")
        """
    }

    /// Writes the winning version of each record and its new sequence: an INSERT for records that had no
    /// head and an UPDATE for those that had (`existing`, read under the owner's lock, which every writer
    /// of this owner's heads holds), which costs less than one upsert (Docs/benchmarks.md §2). A record
    /// keeps its tresor, so the UPDATE leaves `tresor_id` as it is.
    private func writeHeads(
        _ conn: PostgresConnection,
        owner: UUID,
        _ winners: [(VersionRow, Int64)],
        existing: Set<String>,
        now: UnixMillis
    ) async throws {
        let new = winners.filter { !existing.contains($0.0.recordID) }
        let old = winners.filter { existing.contains($0.0.recordID) }
        if !new.isEmpty {
            try await conn.query(
                """
                INSERT INTO heads (owner_id, record_id, tresor_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, sequence,
                                   changed_at)
                SELECT \(owner), h.rid, h.tid, h.vid, h.phys, h.ctr, h.dev, h.del, h.seq, \(now)
                FROM unnest(\(new.map(\.0.recordID)), \(new.map(\.0.tresorID)), \(new.map(\.0.versionID)), \(new.map(\.0.hlcPhysical)),
                            \(new.map(\.0.hlcCounter)), \(new.map(\.0.hlcDevice)), \(new.map(\.0.deleted)), \(new.map(\.1)))
                     AS h(rid, tid, vid, phys, ctr, dev, del, seq)
                """,
                logger: logger
            )
        }
        if !old.isEmpty {
            let updated = try await conn.query(
                """
                UPDATE heads SET version_id = h.vid, hlc_physical = h.phys, hlc_counter = h.ctr, hlc_device = h.dev, deleted = h.del,
                                 sequence = h.seq, changed_at = \(now)
                FROM unnest(\(old.map(\.0.recordID)), \(old.map(\.0.versionID)), \(old.map(\.0.hlcPhysical)), \(old.map(\.0.hlcCounter)),
                            \(old.map(\.0.hlcDevice)), \(old.map(\.0.deleted)), \(old.map(\.1)))
                     AS h(rid, vid, phys, ctr, dev, del, seq)
                WHERE heads.owner_id = \(owner) AND heads.record_id = h.rid
                RETURNING heads.record_id
                """,
                logger: logger
            )
            var count = 0
            for try await _ in updated { count += 1 }
            // Every writer of this owner's heads holds the owner's lock, so the heads read under it are all
            // still there; if one is not, nothing of this push is stored.
            guard count == old.count else { throw RepositoryError.unavailable("a record's head changed during the push") }
        }
    }

    public func page(ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int, maxBytes: Int) async throws -> StoredPage {
        // REPEATABLE READ: one snapshot for every query, so the sizes, the changes and the commitments agree.
        try await transaction { conn in
            try await conn.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", logger: self.logger)
            // `length()` of a stored bytea reads its size without fetching (or decompressing) its bytes.
            let sql = PostgresSQL(connection: conn, logger: self.logger)
            let sizes = try await sql.rows(
                StoredNumber.self,
                RecordSQL.changes("length(v.envelope)::bigint AS value", ownerID: ownerID, tresorID: tresorID, since: since, limit: limit)
            ).map { Int($0.value ?? 0) }
            let fit = StoredPage.fitting(sizes, maxBytes: maxBytes)
            let changes = try await sql.rows(
                ChangeRow.self,
                RecordSQL.changes("h.sequence, v.envelope", ownerID: ownerID, tresorID: tresorID, since: since, limit: fit)
            )
            guard sizes.count < limit, fit == sizes.count else { return StoredPage(changes: changes, done: false, commitments: []) }
            let commitments = try await sql.rows(CommitmentRow.self, RecordSQL.commitments(ownerID: ownerID, tresorID: tresorID))
            return StoredPage(changes: changes, done: true, commitments: commitments)
        }
    }
}
