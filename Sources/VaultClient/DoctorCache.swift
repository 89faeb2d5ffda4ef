import Foundation
import GRDB
import VaultCore

/// The doctor's local ciphertext cache (Docs/design.md §3): the shared records of each patient, as the
/// envelopes the server sent, and a pull cursor per share (patient and tresor), so a repeated view
/// fetches only what changed. It holds no keys and no plaintext; DoctorReader verifies what goes in and
/// decrypts what comes out.
final class DoctorCache: Sendable {
    let queue: DatabaseQueue

    init(url: URL) throws {
        queue = try DeviceDatabase.open(
            at: url,
            configuration: DeviceDatabase.walConfiguration(pageSize: DeviceDatabase.cachePageSize, logLimit: DeviceDatabase.cacheLogLimit),
            migrations: DeviceDatabase.doctor
        )
    }

    /// The first schema: the cached envelopes of each patient's shared records, and a cursor per share.
    static let firstSchema = DeviceDatabase.Migration(
        "v1-doctor-cache",
        sql: """
            CREATE TABLE shared_records (
                owner_id TEXT NOT NULL,
                record_id TEXT NOT NULL,
                tresor_id TEXT NOT NULL,
                hlc_physical INTEGER NOT NULL,
                hlc_counter INTEGER NOT NULL,
                hlc_device TEXT NOT NULL,
                deleted INTEGER NOT NULL,
                envelope BLOB NOT NULL,
                PRIMARY KEY (owner_id, record_id));
            CREATE TABLE cursors (owner_id TEXT NOT NULL, tresor_id TEXT NOT NULL, cursor INTEGER NOT NULL, PRIMARY KEY (owner_id, tresor_id));
            """
    )

    /// Envelopes kept in the binary encoding (Docs/envelope-v1.md §7.1), as the server sent them, instead
    /// of JSON: a cache written before is converted once, when it opens.
    static let binaryEnvelopes = JSONEraConversion.envelopes("v5-doctor-binary-envelopes", tables: ["shared_records"])

    /// Accepted commitments kept in their binary form instead of JSON: converted once, when the cache opens.
    static let binaryCommitments = JSONEraConversion.commitments("v7-doctor-binary-commitments", table: "share_state")

    /// Added after the first schema (Docs/envelope-v1.md §3.4): the version id of each cached head, and per
    /// share the LtHash state of the cached heads with their counts and newest HLC, and the newest state
    /// commitment accepted. A cache from before has no such state, so the migration forgets the cursors:
    /// the next view pulls every head again, once, and builds it.
    static let commitmentTables = DeviceDatabase.Migration(
        "v4-doctor-commitments",
        sql: """
            ALTER TABLE shared_records ADD COLUMN version_id TEXT;
            CREATE TABLE share_state (
                owner_id TEXT NOT NULL,
                tresor_id TEXT NOT NULL,
                state BLOB NOT NULL,
                live INTEGER NOT NULL,
                deleted INTEGER NOT NULL,
                hlc_physical INTEGER NOT NULL,
                hlc_counter INTEGER NOT NULL,
                hlc_device TEXT NOT NULL,
                commitment BLOB,
                PRIMARY KEY (owner_id, tresor_id));
            DELETE FROM cursors;
            """
    )

    /// The heads' set of one share and the newest commitment accepted of it.
    static func shareState(_ db: Database, owner: String, tresor: String) throws -> (HeadSet, StateCommitment?) {
        guard let row = try Row.fetchOne(db, sql: "SELECT * FROM share_state WHERE owner_id = ? AND tresor_id = ?", arguments: [owner, tresor]) else {
            return (HeadSet(), nil)
        }
        guard let set = HeadSet(row: row) else { throw ClientError.localState("the local cache is damaged; remove it and view again") }
        let commitment = try StateCommitment.stored(row["commitment"], damaged: "the newest commitment this cache accepted")
        return (set, commitment)
    }

    static func saveShareState(_ db: Database, owner: String, tresor: String, _ set: HeadSet, _ commitment: StateCommitment?) throws {
        try HeadCopyRow.save(db, table: "share_state", key: [("owner_id", owner), ("tresor_id", tresor)], set: set, commitment: commitment)
    }

    /// Checks the newest commitment the server showed of a share once its pull is done (Docs/envelope-v1.md
    /// §3.4): the patient's signature, the tresor and category, no rollback, and, unless the share holds
    /// quarantined records, that it describes exactly the cached heads. Remembers it when it holds; returns
    /// what is wrong in plain words, or nil.
    func reviewCommitments(
        _ shown: [StateCommitment],
        patient: Certificate,
        tresor: UUID,
        category: String,
        quarantined: Bool
    ) async throws -> (problem: String?, behind: ServerBehind?) {
        let owner = patient.userID.uuidString
        let tresorID = tresor.uuidString
        return try await queue.write { db in
            let (set, seen) = try Self.shareState(db, owner: owner, tresor: tresorID)
            let verdict = CommitmentReview.review(
                shown,
                patient: patient,
                tresors: [tresor: category],
                accepted: seen.map { [tresor: $0] } ?? [:],
                copy: { _ in set },
                comparesSet: { _, _ in !quarantined }
            )
            if let c = verdict.accepted.first { try Self.saveShareState(db, owner: owner, tresor: tresorID, set, c) }
            // Behind only as a verified commitment (or none) says; the last accepted view stands while the
            // cache took nothing since, record by record, from the server (Docs/design.md §5.2).
            // Not another statement at the accepted sequence: two states signed at one sequence are evidence
            // of two histories shown, reported as such (exit 65), not a server merely behind.
            var behind = verdict.behind.first
            if let b = behind, b.shown != b.seen, !quarantined, let seen, seen.describes(set) { behind?.holdsAccepted = true }
            return (verdict.problems.isEmpty ? nil : verdict.problems.joined(separator: "; "), behind)
        }
    }

    /// Whether the cached heads of a share are still exactly the set of the commitment accepted of it, with
    /// no record held aside (a view that stands while the server is behind, Docs/design.md §5.2).
    func holdsAccepted(owner: UUID, tresor: UUID) async throws -> Bool {
        try await queue.read { db in
            let (set, seen) = try Self.shareState(db, owner: owner.uuidString, tresor: tresor.uuidString)
            let held = try QuarantineRows(db: db, feed: (owner.uuidString, tresor.uuidString)).holdsAny()
            return !held && seen?.describes(set) == true
        }
    }

    /// The newest accepted commitment of each share of `owner`, by tresor.
    func acceptedCommitments(owner: UUID) async throws -> [UUID: StateCommitment] {
        try await queue.read { db in
            var out: [UUID: StateCommitment] = [:]
            let rows = try Row.fetchAll(db, sql: "SELECT tresor_id, commitment FROM share_state WHERE owner_id = ?", arguments: [owner.uuidString])
            for row in rows {
                guard let id = UUID(uuidString: row["tresor_id"]) else { continue }
                out[id] = try StateCommitment.stored(row["commitment"], damaged: "the newest commitment this cache accepted")
            }
            return out
        }
    }

    /// Shares the patient revoked in a statement this doctor verified (Docs/envelope-v1.md §3.3): never
    /// trusted again, whatever the server lists later.
    static let revokedTable = DeviceDatabase.Migration(
        "v3-doctor-revoked-shares",
        sql: "CREATE TABLE revoked_shares (share_id TEXT PRIMARY KEY, owner_id TEXT NOT NULL, revoked_at INTEGER NOT NULL);"
    )

    /// Added after the revoked shares (Docs/design.md §3.1): the hash of each request the patient revoked, so
    /// a copy of the same signed request under a new share id is never trusted again. A cache from before
    /// learns the hashes at its next view of each patient (the server lists the revoked shares with their
    /// requests and the patient's revocations).
    static let revokedRequestsTable = DeviceDatabase.Migration(
        "v6-doctor-revoked-requests",
        sql: "CREATE TABLE revoked_requests (request_hash BLOB PRIMARY KEY, owner_id TEXT NOT NULL, revoked_at INTEGER NOT NULL);"
    )

    /// Remembers that the patient revoked `shareID`, whose request is `request`, and whatever grants of it
    /// the server showed (`also`: the delivered successor), so that none of them is trusted under another id.
    /// Durable at once (a full sync of the log): a revocation must survive a power cut.
    func markRevoked(shareID: UUID, request: Grant, also: [Grant] = [], owner: UUID, at: UnixMillis) throws {
        try DeviceDatabase.writeDurably(queue) { db in
            try db.execute(
                sql: "INSERT OR IGNORE INTO revoked_shares (share_id, owner_id, revoked_at) VALUES (?, ?, ?)",
                arguments: [shareID.uuidString, owner.uuidString, at]
            )
            for grant in [request] + also {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO revoked_requests (request_hash, owner_id, revoked_at) VALUES (?, ?, ?)",
                    arguments: [Data(grant.statementHash), owner.uuidString, at]
                )
            }
        }
    }

    /// Whether the patient revoked `shareID`, or the request `request` under any share id.
    func isRevoked(shareID: UUID, request: Grant) throws -> Bool {
        try queue.read { db in
            try Bool.fetchOne(
                db,
                sql:
                    "SELECT EXISTS (SELECT 1 FROM revoked_shares WHERE share_id = ?) OR EXISTS (SELECT 1 FROM revoked_requests WHERE request_hash = ?)",
                arguments: [shareID.uuidString, Data(request.statementHash)]
            ) ?? false
        }
    }

    /// Shared records that failed their integrity check (Docs/design.md §5), added after the first schema:
    /// one row per patient and change sequence, never shown, fetched again by every view of the share.
    /// Keyed by share since `quarantineByTresor`.
    static let quarantineTable = DeviceDatabase.Migration(
        "v2-doctor-quarantine",
        sql: """
            CREATE TABLE quarantine (
                owner_id TEXT NOT NULL,
                tresor_id TEXT NOT NULL,
                sequence INTEGER NOT NULL,
                record_id TEXT,
                version_id TEXT,
                reason TEXT NOT NULL,
                PRIMARY KEY (owner_id, sequence));
            """
    )

    /// The quarantine keyed by share (Docs/design.md §5): patient, tresor and change sequence, where it was
    /// patient and sequence. Under the old key a change that a hostile server put in another share's page
    /// at a quarantined sequence overwrote or released the row, so the failure of the first share was no
    /// longer reported. Every row already names its tresor (the column was always written), so each is
    /// carried over as it is, still held by its share. A row such a server already moved or released
    /// under the old key cannot be told apart and is not brought back: that share holds nothing aside, so
    /// its next view checks the patient's commitment against the cached heads, which miss the record.
    static let quarantineByTresor = DeviceDatabase.Migration(
        "v8-doctor-quarantine-by-tresor",
        sql: """
            CREATE TABLE quarantine_by_tresor (
                owner_id TEXT NOT NULL,
                tresor_id TEXT NOT NULL,
                sequence INTEGER NOT NULL,
                record_id TEXT,
                version_id TEXT,
                reason TEXT NOT NULL,
                PRIMARY KEY (owner_id, tresor_id, sequence));
            INSERT INTO quarantine_by_tresor (owner_id, tresor_id, sequence, record_id, version_id, reason)
                SELECT owner_id, tresor_id, sequence, record_id, version_id, reason FROM quarantine;
            DROP TABLE quarantine;
            ALTER TABLE quarantine_by_tresor RENAME TO quarantine;
            """
    )

    /// One envelope to store: its change sequence, its header and the binary encoding it is kept as.
    struct Entry: Sendable {
        var sequence: UInt64
        var header: RecordHeader
        var versionID: String
        var bytes: Data

        /// The head this entry makes of its record once stored.
        var head: HeadSet.Head { HeadSet.Head(versionID: versionID, deleted: header.deleted, timestamp: header.timestamp) }

        /// What storing it as a head needs.
        var stored: Head {
            Head(
                sequence: sequence,
                recordID: header.recordID.hex,
                timestamp: header.timestamp,
                deleted: header.deleted,
                versionID: versionID,
                bytes: bytes
            )
        }
    }

    /// What the cache holds of one record of an owner: its timestamp, its head and the tresor it is kept under.
    struct CachedHead {
        var timestamp: HLCTimestamp?
        var head: HeadSet.Head?
        var tresorID: String?

        static func read(_ db: Database, owner: String, recordID: String) throws -> CachedHead? {
            let statement = try db.cachedStatement(
                sql:
                    "SELECT hlc_physical, hlc_counter, hlc_device, version_id, deleted, tresor_id FROM shared_records WHERE owner_id = ? AND record_id = ?"
            )
            guard let row = try Row.fetchOne(statement, arguments: [owner, recordID]) else { return nil }
            let held = LocalStore.timestamp(row[0], row[1], row[2])
            let head = (row[3] as String?).map { HeadSet.Head(versionID: $0, deleted: row[4] as Bool, timestamp: held ?? HeadSet.noTimestamp) }
            return CachedHead(timestamp: held, head: head, tresorID: row[5])
        }
    }

    /// What one pulled change turned out to be: a verified envelope to store, or a record to keep aside.
    enum Pulled: Sendable {
        case verified(Entry)
        case failed(QuarantinedRecord)

        /// The change sequence it was pulled at.
        var sequence: UInt64 {
            switch self {
            case let .verified(entry): entry.sequence
            case let .failed(q): q.sequence
            }
        }
    }

    /// The last change sequence stored for the share of `tresor` by `owner` (0 before the first view).
    func cursor(owner: UUID, tresor: UUID) async throws -> UInt64 {
        try await queue.read { db in
            let sql = "SELECT cursor FROM cursors WHERE owner_id = ? AND tresor_id = ?"
            return try Int64.fetchOne(db, sql: sql, arguments: [owner.uuidString, tresor.uuidString]).map(UInt64.init) ?? 0
        }
    }

    /// Stores pulled changes of a share, in one transaction: a verified envelope replaces the head held
    /// for its record and heals its quarantine, unless it is older than that head (a replay); a failed
    /// one is kept aside. Also releases the quarantined `release` sequences (no change is there any more),
    /// drops the records held pending at the `consumed` sequences (`pulled` carries them, checked one by
    /// one; Docs/commitment-pages.md §8), and advances the share's cursor to `cursor` when given.
    func store(
        _ pulled: [Pulled],
        release: [UInt64],
        owner: UUID,
        tresor: UUID,
        cursor: UInt64?,
        consumed: [UInt64] = []
    ) async throws {
        let next = try cursor.map(Self.storedCursor)
        let ownerID = owner.uuidString
        let tresorID = tresor.uuidString
        try await queue.write { db in
            var heads = try HeadWriter(db: db, owner: ownerID, tresor: tresorID)
            for sequence in release { try heads.quarantine.release(sequence: sequence) }
            if !consumed.isEmpty { try Self.dropPending(db, owner: ownerID, tresor: tresorID, sequences: consumed) }
            for item in pulled {
                switch item {
                case let .verified(entry): try heads.keep(entry.stored)
                case let .failed(q): try heads.hold(q)
                }
            }
            try heads.finish()
            if let next { try Self.saveCursor(db, owner: ownerID, tresor: tresorID, next) }
        }
    }

    /// A cursor as the cache keeps it.
    static func storedCursor(_ cursor: UInt64) throws -> Int64 {
        guard let next = Int64(exactly: cursor) else { throw ClientError.integrity("the server sent an impossible sequence number") }
        return next
    }

    static func saveCursor(_ db: Database, owner: String, tresor: String, _ next: Int64) throws {
        try db.execute(
            sql: """
                INSERT INTO cursors (owner_id, tresor_id, cursor) VALUES (?, ?, ?)
                ON CONFLICT (owner_id, tresor_id) DO UPDATE SET cursor = excluded.cursor
                """,
            arguments: [owner, tresor, next]
        )
    }

    /// The quarantined records of the share of `tresor` by `owner`, by sequence.
    func quarantined(owner: UUID, tresor: UUID) async throws -> [QuarantinedRecord] {
        try await queue.read { db in try QuarantineRows(db: db, feed: (owner.uuidString, tresor.uuidString)).all() }
    }
}

extension DoctorReader {
    /// How current this doctor's cached view of `patientID` is confirmed to be: the oldest time among the
    /// patient's commitments the cache accepted, one per viewed share (nil before any was accepted). It is
    /// what the last views checked, not a fresh check.
    public func asOf(patientID: UUID) async throws -> UnixMillis? {
        try await cache.acceptedCommitments(owner: patientID).values.map(\.committedAt).min()
    }
}
