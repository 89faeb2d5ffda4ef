import Foundation
import GRDB
import VaultCore
import VaultSQLite

/// What this device knows of the heads the server holds per tresor (Docs/envelope-v1.md §3.4): their
/// LtHash, counts and newest HLC, kept up to date from every verified pulled change and every
/// acknowledged push, and the newest state commitment the device verified. The device signs the
/// commitment of each push from this copy, and checks the server's newest commitment against it.
extension LocalStore {
    /// Added after the first schema. The server's head of each record (`server_version`, `server_deleted`),
    /// and per tresor the copy of the server's state and the newest commitment seen. A device upgraded
    /// from before has no such copy, so the migration forgets the pull cursor: the next sync pulls every
    /// head again, once, and rebuilds it (pulled heads the device already holds change nothing else).
    static let commitmentTables = DeviceDatabase.Migration(
        "v4-state-commitments",
        sql: """
            ALTER TABLE records ADD COLUMN server_version TEXT;
            ALTER TABLE records ADD COLUMN server_deleted INTEGER;
            CREATE TABLE server_state (
                tresor_id TEXT PRIMARY KEY,
                state BLOB NOT NULL,
                live INTEGER NOT NULL,
                deleted INTEGER NOT NULL,
                hlc_physical INTEGER NOT NULL,
                hlc_counter INTEGER NOT NULL,
                hlc_device TEXT NOT NULL,
                commitment BLOB,
                uncommitted INTEGER NOT NULL DEFAULT 0);
            DELETE FROM meta WHERE key = 'cursor';
            """
    )

    /// The copy of the server's state of every tresor, with the newest commitment seen of each.
    func serverStates() throws -> ServerStates {
        try read { tx in try ServerStates.load(tx) }
    }

    /// The tresors whose newest pushed versions went without a commitment (`ServerStates.uncommitted`).
    func uncommittedTresors() throws -> Set<UUID> {
        try queue.read { db in
            Set(
                try String.fetchAll(db.cachedStatement(sql: "SELECT tresor_id FROM server_state WHERE uncommitted != 0")).compactMap(
                    UUID.init(uuidString:)
                )
            )
        }
    }
}

/// The device's copy of the server's heads per tresor, loaded once per transaction, changed in memory
/// and saved at its end (one 2 KiB row per changed tresor, not one per record).
struct ServerStates {
    /// The heads' set per tresor.
    var sets: [UUID: HeadSet] = [:]
    /// The newest verified commitment per tresor.
    var commitments: [UUID: StateCommitment] = [:]
    /// Tresors this device pushed versions to without a commitment (it held quarantined records, so its
    /// copy lacked their heads): the server's newest commitment is stale by this device's own doing, so it
    /// is not held against the server, and the device commits again once its copy is whole.
    var uncommitted = Set<UUID>()
    private var changed = Set<UUID>()

    static func load(_ tx: LocalStore.Transaction) throws -> ServerStates {
        var states = ServerStates()
        for row in try Row.fetchAll(tx.db.cachedStatement(sql: "SELECT * FROM server_state")) {
            guard let id = UUID(uuidString: row["tresor_id"]) else { continue }
            guard let set = HeadSet(row: row) else {
                throw ClientError.localState("the local copy of the server's state is damaged; sign in again on this device")
            }
            states.sets[id] = set
            states.commitments[id] = try StateCommitment.stored(row["commitment"], damaged: "the newest commitment this device accepted")
            if (row["uncommitted"] as Int64? ?? 0) != 0 { states.uncommitted.insert(id) }
        }
        return states
    }

    /// The server's head of `env`'s record is now `env` (a verified pulled change; an acknowledged push
    /// goes through `acknowledge`).
    mutating func setServerHead(_ env: Envelope, _ tx: LocalStore.Transaction) throws {
        let h = env.header
        let rid = h.recordID.hex
        let versionID = env.versionID
        let old = try tx.serverHead(rid)
        guard old?.versionID != versionID else { return }
        try replace(h, rid, old: old, with: versionID)
        try tx.db.cachedStatement(sql: "UPDATE records SET server_version = ?, server_deleted = ? WHERE record_id = ?")
            .execute(arguments: [versionID, h.deleted, rid])
    }

    /// Pushed versions the server stored or already had: they leave the outbox (in one statement), the
    /// server's timestamp of each record moves forward (`advanceServerTimestamp`), and those marked `head`
    /// became the server's head of their record (`setServerHead`). One read and at most one write of each record's row.
    mutating func acknowledge(_ items: [(item: OutboxItem, head: Bool)], _ tx: LocalStore.Transaction) throws {
        guard !items.isEmpty else { return }
        try tx.dropOutbox(versionIDs: items.map(\.item.versionID))
        for (item, head) in items { try acknowledge(item, head: head, tx) }
    }

    private mutating func acknowledge(_ item: OutboxItem, head becameHead: Bool, _ tx: LocalStore.Transaction) throws {
        let h = item.envelope.header
        let rid = h.recordID.hex
        guard let row = try tx.serverRow(rid) else {
            // A record this device does not hold: no row to write, but the version is the server's head all the same.
            if becameHead { try replace(h, rid, old: nil, with: item.versionID) }
            return
        }
        // The server's newest timestamp of the record moves forward only; nil binds leave a column as it is.
        let timestamp = (row.timestamp.map { $0 < h.timestamp } ?? true) ? h.timestamp : nil
        var version: String?
        if becameHead, row.head?.versionID != item.versionID {
            try replace(h, rid, old: row.head, with: item.versionID)
            version = item.versionID
        }
        guard timestamp != nil || version != nil else { return }
        let write = try SQLiteStep(
            tx.db,
            sql: """
                UPDATE records SET server_physical = coalesce(?, server_physical), server_counter = coalesce(?, server_counter),
                    server_device = coalesce(?, server_device), server_version = coalesce(?, server_version),
                    server_deleted = coalesce(?, server_deleted)
                WHERE record_id = ?
                """
        )
        defer { write.finish() }
        try write.bind(
            timestamp.map { .int(Int64(clamping: $0.physicalMs)) } ?? .null,
            timestamp.map { .int(Int64($0.counter)) } ?? .null,
            timestamp.map { .text($0.deviceID) } ?? .null,
            version.map { .text($0) } ?? .null,
            version == nil ? .null : .int(h.deleted ? 1 : 0),
            .text(rid)
        )
        _ = try write.step()
    }

    /// `versionID` (of a version with header `h`) in place of `old` as the head of record `rid`.
    mutating func replace(_ h: RecordHeader, _ rid: String, old: HeadSet.Head?, with versionID: String) throws {
        let head = HeadSet.Head(versionID: versionID, deleted: h.deleted, timestamp: h.timestamp)
        do { try sets[h.tresorID, default: HeadSet()].replace(recordID: rid, old: old, with: head) } catch {
            throw ClientError.localState("a record id or version id on this device is damaged")
        }
        changed.insert(h.tresorID)
    }

    /// Remembers `c` as the newest commitment of its tresor.
    mutating func remember(_ c: StateCommitment) {
        commitments[c.tresorID] = c
        changed.insert(c.tresorID)
    }

    /// Marks whether `tresor`'s newest pushed versions went without a commitment.
    mutating func setUncommitted(_ tresor: UUID, _ value: Bool) {
        guard uncommitted.contains(tresor) != value else { return }
        if value { uncommitted.insert(tresor) } else { uncommitted.remove(tresor) }
        changed.insert(tresor)
    }

    /// Writes the tresors that changed.
    func save(_ tx: LocalStore.Transaction) throws {
        for id in changed {
            try HeadCopyRow.save(
                tx.db,
                table: "server_state",
                key: [("tresor_id", id.uuidString)],
                set: sets[id] ?? HeadSet(),
                commitment: commitments[id],
                extra: [("uncommitted", uncommitted.contains(id))]
            )
        }
    }

    /// Checks the newest commitments a final pull page carried (Docs/envelope-v1.md §3.4) against this
    /// copy, and remembers those that verify. Returns what is wrong, in plain words (empty when all is
    /// well). `tresors` maps the patient's tresor ids to their categories; a tresor in `skipping` (it
    /// holds quarantined records, whose failure already stands) is checked for signature and rollback only.
    mutating func review(
        _ shown: [StateCommitment],
        patient: Certificate,
        tresors: [UUID: String],
        skipping: Set<UUID> = []
    ) -> [String] {
        verdict(shown, patient: patient, tresors: tresors, skipping: skipping).problems
    }

    /// `review`, with the tresors whose server is behind the state accepted before (Docs/design.md §5.2).
    mutating func verdict(
        _ shown: [StateCommitment],
        patient: Certificate,
        tresors: [UUID: String],
        skipping: Set<UUID> = []
    ) -> CommitmentReview.Verdict {
        let verdict = CommitmentReview.review(
            shown,
            patient: patient,
            tresors: tresors,
            accepted: commitments,
            copy: { sets[$0] ?? HeadSet() },
            comparesSet: { id, c in
                // A tresor this device left uncommitted differs from the newest commitment by its own pushes, so
                // the set is not compared, but only while the server still shows the commitment already accepted:
                // a newer one was made after those pushes and must describe the copy, or a server could get
                // this device to accept (and later sign on top of) a set with another device's records withheld.
                let own = uncommitted.contains(id) && c != nil && c == commitments[id]
                return !(skipping.contains(id) || own)
            }
        )
        for c in verdict.accepted { remember(c) }
        return verdict
    }
}

extension HeadSet {
    /// A set from a row of `state, live, deleted, hlc_physical, hlc_counter, hlc_device`, or nil when damaged.
    init?(row: Row) {
        guard let data = row["state"] as Data?, let hash = try? LtHash(bytes: [UInt8](data)),
            let live = row["live"] as Int64?, let deleted = row["deleted"] as Int64?,
            let newest = LocalStore.timestamp(row["hlc_physical"], row["hlc_counter"], row["hlc_device"])
        else { return nil }
        self.init(hash: hash, live: UInt64(bitPattern: live), deleted: UInt64(bitPattern: deleted), newest: newest)
    }
}

extension LocalStore.Transaction {
    /// What this device last learnt of the server's copy of a record it holds: the server's head (nil
    /// before any) and the newest timestamp the server showed; nil when the device holds no such record.
    /// Through SQLite's C API: GRDB's arguments and rows cost more than the query, once per pushed record.
    func serverRow(_ recordID: String) throws -> (head: HeadSet.Head?, timestamp: HLCTimestamp?)? {
        let read = try SQLiteStep(
            db,
            sql: "SELECT server_version, server_deleted, server_physical, server_counter, server_device FROM records WHERE record_id = ?"
        )
        defer { read.finish() }
        try read.bind(.text(recordID))
        guard try read.step() else { return nil }
        let timestamp = LocalStore.timestamp(read.optionalInt(2), read.optionalInt(3), read.optionalText(4))
        let head = read.optionalText(0).map {
            HeadSet.Head(versionID: $0, deleted: (read.optionalInt(1) ?? 0) != 0, timestamp: timestamp ?? HeadSet.noTimestamp)
        }
        return (head, timestamp)
    }

    /// The server's head of a record as this device last learnt it, if any.
    func serverHead(_ recordID: String) throws -> HeadSet.Head? { try serverRow(recordID)?.head }
}

extension LocalStore.Transaction {
    /// The tresors among `tresors` holding quarantined records: all of them when a quarantined record is
    /// one this device does not hold (its tresor is then unknown).
    func quarantinedTresors(among tresors: Set<UUID>) throws -> Set<UUID> {
        let rows = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT DISTINCT r.tresor_id FROM quarantine q LEFT JOIN records r ON r.record_id = q.record_id")
        )
        var held = Set<UUID>()
        for row in rows {
            guard let text = row["tresor_id"] as String?, let id = UUID(uuidString: text) else { return tresors }
            held.insert(id)
        }
        return held
    }
}

/// A commitment a push carries, with the state it describes (compared with what the server then holds).
struct PlannedCommitment: Sendable {
    var commitment: StateCommitment
    var state: HeadSet
}

extension StateCommitment {
    /// A commitment as kept locally: its binary form (Docs/envelope-v1.md §3.4; stores that kept JSON
    /// converted it once, `JSONEraConversion`). One that does not decode is damage, never "none accepted
    /// yet": forgetting it would let a server roll the tresor back past it unnoticed.
    static func stored(_ data: Data?, damaged what: String) throws -> StateCommitment? {
        guard let data else { return nil }
        do {
            return try StateCommitment(binary: [UInt8](data))
        } catch {
            throw ClientError.localState("\(what) is damaged in the local store; remove this device's copy and sign in again")
        }
    }

    /// The form `stored` reads, as written now.
    var storedForm: Data { Data(binary) }
}
