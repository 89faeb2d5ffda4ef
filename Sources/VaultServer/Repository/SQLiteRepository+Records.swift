import Foundation
import GRDB
import VaultCore
import VaultSQLite

/// Append-only versions, last-writer-wins heads and per-owner change sequences (Docs/design.md §5).
extension SQLiteRepository: SQLRecordReads {
    public func storeVersions(ownerID: UUID, _ versions: VersionChunks, commitments: [CommitmentRow]) async throws -> [StoreOutcome] {
        let owner = Self.id(ownerID)
        let now = Date().unixMillis
        return try await pool.write { db in
            // An account deleted after the push was authenticated (the writer orders the two): nothing is
            // stored for it, rather than versions no account owns (and, with commitments, a foreign-key failure).
            guard try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM users WHERE id = ?)", arguments: [owner]) == true else {
                throw RepositoryError.notFound("account")
            }
            // First, so a stale commitment refuses the push before anything of it is written (the throw rolls back).
            try db.run { sql in try await RecordSQL.replaceCommitments(sql, owner: ownerID, commitments, now: now) }
            var last = try Int64.fetchOne(db, sql: "SELECT last_sequence FROM owner_sequences WHERE owner_id = ?", arguments: [owner]) ?? 0
            let start = last
            let insertVersion = try SQLiteStep(
                db,
                sql: """
                    INSERT INTO versions (version_id, owner_id, record_id, tresor_id, epoch, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (version_id) DO NOTHING
                    """
            )
            let readHead = try SQLiteStep(
                db,
                sql: "SELECT hlc_physical, hlc_counter, hlc_device, deleted, tresor_id, version_id FROM heads WHERE owner_id = ? AND record_id = ?"
            )
            let writeHead = try SQLiteStep(
                db,
                sql: """
                    INSERT INTO heads (owner_id, record_id, tresor_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, sequence, changed_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (owner_id, record_id) DO UPDATE SET tresor_id = excluded.tresor_id, version_id = excluded.version_id,
                        hlc_physical = excluded.hlc_physical, hlc_counter = excluded.hlc_counter, hlc_device = excluded.hlc_device,
                        deleted = excluded.deleted, sequence = excluded.sequence, changed_at = excluded.changed_at
                    """
            )
            defer {
                insertVersion.finish()
                readHead.finish()
                writeHead.finish()
            }
            var outcomes: [StoreOutcome] = []
            // Each tresor's head state, updated for every head written (Docs/commitment-pages.md §5).
            var fold = TresorStateFold()
            // The writer's queue waits here for each chunk still being checked (never a thread of the tasks
            // checking them); a failed check of the push throws and rolls everything back.
            while let chunk = try versions.nextBlocking() {
                for v in chunk {
                    let tresor = Self.id(v.tresorID)
                    // The head first: a record stays in the tresor it was first written to (checked here, under
                    // the writer, so two pushes at once cannot place one record in two tresors).
                    try readHead.bind(.text(owner), .text(v.recordID))
                    var head: HeadKey?
                    var headVersion = ""
                    if try readHead.step() {
                        guard try readHead.text(4) == tresor else {
                            readHead.finish()
                            outcomes.append(.misplaced)
                            continue
                        }
                        head = HeadKey(
                            hlcPhysical: try readHead.int(0),
                            hlcCounter: try readHead.int(1),
                            hlcDevice: try readHead.text(2),
                            deleted: try readHead.int(3) != 0
                        )
                        headVersion = try readHead.text(5)
                    }
                    readHead.finish()
                    try insertVersion.bind(
                        .text(v.versionID),
                        .text(owner),
                        .text(v.recordID),
                        .text(tresor),
                        .int(Int64(v.epoch)),
                        .int(v.hlcPhysical),
                        .int(v.hlcCounter),
                        .text(v.hlcDevice),
                        .int(v.deleted ? 1 : 0),
                        .blob(v.envelope)
                    )
                    _ = try insertVersion.step()
                    guard db.changesCount == 1 else {
                        outcomes.append(.duplicate)
                        continue
                    }
                    if let head, !v.wins(over: head) {
                        outcomes.append(.stored(sequence: nil))
                        continue
                    }
                    last = try StoredNumberOutOfRange.successor(of: last, "the change sequence")
                    if !fold.holds(v.tresorID) { fold.hold(v.tresorID, try Self.state(db, owner: ownerID, tresorID: v.tresorID)) }
                    try fold.replace(v, old: head.map { (headVersion, $0.deleted) })
                    try writeHead.bind(
                        .text(owner),
                        .text(v.recordID),
                        .text(tresor),
                        .text(v.versionID),
                        .int(v.hlcPhysical),
                        .int(v.hlcCounter),
                        .text(v.hlcDevice),
                        .int(v.deleted ? 1 : 0),
                        .int(last),
                        .int(now)
                    )
                    _ = try writeHead.step()
                    outcomes.append(.stored(sequence: UInt64(last)))
                }
            }
            // The commitments that check their batch, against the state it leaves; a mismatch rolls back.
            for c in commitments where c.expected != nil && !fold.holds(c.tresorID) {
                fold.hold(c.tresorID, try Self.state(db, owner: ownerID, tresorID: c.tresorID))
            }
            try fold.check(commitments)
            for (tresor, state) in fold.changedStates { try db.execute(TresorStateSQL.put(owner: ownerID, tresorID: tresor, state)) }
            if last != start {
                try db.execute(
                    sql: """
                        INSERT INTO owner_sequences (owner_id, last_sequence) VALUES (?, ?)
                        ON CONFLICT (owner_id) DO UPDATE SET last_sequence = excluded.last_sequence
                        """,
                    arguments: [owner, last]
                )
            }
            return outcomes
        }
    }

    /// The stored head state of `tresorID`, nil for none.
    static func state(_ db: Database, owner: UUID, tresorID: UUID) throws -> HeadSet? {
        try db.row(TresorState.self, TresorStateSQL.load(owner: owner, tresorID: tresorID))?.set
    }

    static func changes(_ db: Database, ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int) throws -> [ChangeRow] {
        try db.rows(ChangeRow.self, RecordSQL.changes("h.sequence, v.envelope", ownerID: ownerID, tresorID: tresorID, since: since, limit: limit))
    }

    /// The sizes of the envelopes of the next changes, at most `limit`, read up to the first that passes
    /// `maxBytes` (`StoredPage.fitting` gives the same answer as over all `limit`: it stops there too).
    /// `length()` of a blob reads its size from the record header, not its bytes; stopping at the bound
    /// spares the changes a page of large envelopes does not hold (a page of 4 MiB holds about 250
    /// envelopes of 16 KiB, and reading the sizes of 1,000 took most of the cost of a page).
    static func sizes(_ db: Database, ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int, maxBytes: Int) throws -> [Int] {
        let query = RecordSQL.changes("length(v.envelope) AS value", ownerID: ownerID, tresorID: tresorID, since: since, limit: limit)
        let rows = try Int64.fetchCursor(db.cachedStatement(sql: query.text(for: .sqlite)), arguments: query.sqliteArguments)
        var sizes: [Int] = []
        var total = StoredPage.pageFraming
        while let size = try rows.next() {
            sizes.append(Int(size))
            total += PullPageFrame.changeCount(envelopeBytes: Int(size))
            guard total > maxBytes else { continue }
            // A first change larger than the bound still makes the page; the size after it says whether
            // another change follows (the page is then not the last).
            if sizes.count == 1, let next = try rows.next() { sizes.append(Int(next)) }
            break
        }
        return sizes
    }

    public func page(ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int, maxBytes: Int) async throws -> StoredPage {
        // One read transaction: a WAL snapshot, so the sizes, the changes and the commitments agree.
        try await pool.read { db in
            let sizes = try Self.sizes(db, ownerID: ownerID, tresorID: tresorID, since: since, limit: limit, maxBytes: maxBytes)
            let fit = StoredPage.fitting(sizes, maxBytes: maxBytes)
            let changes = try Self.changes(db, ownerID: ownerID, tresorID: tresorID, since: since, limit: fit)
            guard sizes.count < limit, fit == sizes.count else { return StoredPage(changes: changes, done: false, commitments: []) }
            return StoredPage(
                changes: changes,
                done: true,
                commitments: try db.rows(CommitmentRow.self, RecordSQL.commitments(ownerID: ownerID, tresorID: tresorID))
            )
        }
    }
}
