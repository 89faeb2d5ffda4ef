import Foundation
import VaultCore

/// Each tresor's head state, kept beside its newest commitment (Docs/commitment-pages.md §5): the
/// LtHash16 state of its heads with their counts and newest HLC, the fold of `heads` at every commit.
/// Every store of a head updates it in the same transaction; a push checked by its commitment compares
/// it with the commitment before the transaction ends.
enum TresorStateSQL {
    /// The stored state of `tresorID` (no row: the empty set).
    static func load(owner: UUID, tresorID: UUID) -> SQLStatement {
        """
        SELECT tresor_id, lthash, live, deleted, newest_physical, newest_counter, newest_device FROM tresor_states
        WHERE owner_id = \(owner) AND tresor_id = \(tresorID)
        """
    }

    /// Stores (or replaces) the state of `tresorID`.
    static func put(owner: UUID, tresorID: UUID, _ state: HeadSet) -> SQLStatement {
        """
        INSERT INTO tresor_states (tresor_id, owner_id, lthash, live, deleted, newest_physical, newest_counter, newest_device)
        VALUES (\(tresorID), \(owner), \(state.hash.bytes), \(Int64(clamping: state.live)), \(Int64(clamping: state.deleted)),
                \(Int64(clamping: state.newest.physicalMs)), \(Int64(state.newest.counter)), \(state.newest.deviceID))
        ON CONFLICT (tresor_id) DO UPDATE SET lthash = excluded.lthash, live = excluded.live, deleted = excluded.deleted,
            newest_physical = excluded.newest_physical, newest_counter = excluded.newest_counter, newest_device = excluded.newest_device
        """
    }

    /// The owner's stored commitments beside the stored states of their tresors.
    static func commitmentsWithStates(owner: UUID) -> SQLStatement {
        """
        SELECT c.tresor_id, c.statement, s.lthash, s.live, s.deleted, s.newest_physical, s.newest_counter, s.newest_device
        FROM tresor_commitments c LEFT JOIN tresor_states s ON s.tresor_id = c.tresor_id AND s.owner_id = c.owner_id
        WHERE c.owner_id = \(owner)
        """
    }

    /// Computes the state of every tresor from its stored heads (the migration that made the table), one
    /// tresor at a time.
    static func rebuild(_ sql: any SQLConnection) async throws {
        for t in try await sql.rows(TresorOfHeads.self, "SELECT DISTINCT owner_id, tresor_id FROM heads") {
            let heads = try await sql.rows(
                StoredHead.self,
                """
                SELECT record_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted FROM heads
                WHERE owner_id = \(t.owner) AND tresor_id = \(t.tresor)
                """
            )
            var state = HeadSet()
            for h in heads { try state.replace(recordID: h.recordID, old: nil, with: h.head) }
            try await sql.execute(put(owner: t.owner, tresorID: t.tresor, state))
        }
    }

    private struct TresorOfHeads: StoredRowDecodable, Sendable {
        var owner: UUID
        var tresor: UUID
        init(stored r: some StoredRow) throws {
            owner = try r.uuid("owner_id")
            tresor = try r.uuid("tresor_id")
        }
    }

    /// A stored head as an element of its tresor's state.
    private struct StoredHead: StoredRowDecodable, Sendable {
        var recordID: String
        var head: HeadSet.Head
        init(stored r: some StoredRow) throws {
            recordID = try r.string("record_id")
            head = HeadSet.Head(
                versionID: try r.string("version_id"),
                deleted: try r.bool("deleted"),
                timestamp: try TresorState.timestamp(
                    physical: try r.int64("hlc_physical"),
                    counter: try r.int64("hlc_counter"),
                    device: try r.string("hlc_device")
                )
            )
        }
    }
}

/// A tresor's stored state (a row of `tresor_states`).
struct TresorState: StoredRowDecodable, Sendable {
    var tresorID: UUID
    var set: HeadSet

    init(stored r: some StoredRow) throws {
        tresorID = try r.uuid("tresor_id")
        set = try Self.set(r) ?? HeadSet()
    }

    /// The state in the state columns of `r`; nil when they are NULL (an outer join found no row).
    static func set(_ r: some StoredRow) throws -> HeadSet? {
        guard let live = try r.optionalInt64("live") else { return nil }
        let hash: LtHash
        do { hash = try LtHash(bytes: try r.bytes("lthash")) } catch {
            throw StoredNumberOutOfRange(what: "a tresor's LtHash state", value: "of another size")
        }
        guard let live = UInt64(exactly: live) else { throw StoredNumberOutOfRange(what: "live", value: String(live)) }
        return HeadSet(
            hash: hash,
            live: live,
            deleted: try r.uint64("deleted"),
            newest: try timestamp(
                physical: try r.int64("newest_physical"),
                counter: try r.int64("newest_counter"),
                device: try r.string("newest_device")
            )
        )
    }

    /// An HLC from its stored columns, which the server wrote from a signed header (never negative, the
    /// counter within 32 bits).
    static func timestamp(physical: Int64, counter: Int64, device: String) throws -> HLCTimestamp {
        guard let p = UInt64(exactly: physical) else { throw StoredNumberOutOfRange(what: "an HLC time", value: String(physical)) }
        guard let c = UInt32(exactly: counter) else { throw StoredNumberOutOfRange(what: "an HLC counter", value: String(counter)) }
        return HLCTimestamp(physicalMs: p, counter: c, deviceID: device)
    }
}

/// A stored commitment and the stored state of its tresor, to tell whether the one describes the other.
struct CommitmentWithState: StoredRowDecodable, Sendable {
    var tresorID: UUID
    var describesState: Bool

    init(stored r: some StoredRow) throws {
        tresorID = try r.uuid("tresor_id")
        let statement = try? JSONDecoder().decode(StateCommitment.self, from: Data(try r.bytes("statement")))
        let state = try TresorState.set(r) ?? HeadSet()
        describesState = statement?.describes(state) ?? false
    }
}

/// The states of the tresors one push changes (Docs/commitment-pages.md §5): each loaded once, updated
/// for every version the store makes a head, compared with the commitments that must match, and written
/// back before the push's transaction commits.
struct TresorStateFold {
    private(set) var states: [UUID: HeadSet] = [:]
    private var changed: [UUID] = []

    /// Whether `tresor`'s state is loaded.
    func holds(_ tresor: UUID) -> Bool { states[tresor] != nil }

    /// Takes `tresor`'s stored state (nil: none stored, the empty set).
    mutating func hold(_ tresor: UUID, _ stored: HeadSet?) { states[tresor] = stored ?? HeadSet() }

    /// Makes `version` the head of its record in place of `old` (nil when the record had none). The
    /// tresor's state must be held.
    mutating func replace(_ version: VersionRow, old: (versionID: String, deleted: Bool)?) throws {
        let t = version.tresorID
        var state = states[t] ?? HeadSet()
        let new = HeadSet.Head(
            versionID: version.versionID,
            deleted: version.deleted,
            timestamp: try TresorState.timestamp(physical: version.hlcPhysical, counter: version.hlcCounter, device: version.hlcDevice)
        )
        let previous = old.map { HeadSet.Head(versionID: $0.versionID, deleted: $0.deleted, timestamp: HeadSet.noTimestamp) }
        do { try state.replace(recordID: version.recordID, old: previous, with: new) } catch {
            throw StoredNumberOutOfRange(what: "a record id or version id", value: "that is not 64 hex digits")
        }
        states[t] = state
        if !changed.contains(t) { changed.append(t) }
    }

    /// The states changed, to write back.
    var changedStates: [(UUID, HeadSet)] { changed.map { ($0, states[$0] ?? HeadSet()) } }

    /// Throws `.commitmentMismatch` for the first commitment that must match and does not describe its
    /// tresor's state (every such tresor's state must be held).
    func check(_ commitments: [CommitmentRow]) throws {
        for c in commitments {
            guard let expected = c.expected else { continue }
            guard expected.describes(states[c.tresorID] ?? HeadSet()) else { throw RepositoryError.commitmentMismatch(c.tresorID) }
        }
    }
}
