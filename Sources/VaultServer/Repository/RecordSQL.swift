import Foundation
import VaultAPI
import VaultCore

/// The statements of record heads and state commitments that both engines run alike (Docs/design.md §5);
/// storing a push and reading a page stay with each backend, which hold and lock them differently.
enum RecordSQL {
    /// `select` of the heads after `since` (of `tresorID` when given), in sequence order, at most `limit`.
    static func changes(_ select: String, ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int) -> SQLStatement {
        let tresor: SQLStatement = if let tresorID { "AND h.tresor_id = \(tresorID) " } else { "" }
        return """
            SELECT \(sql: select) FROM heads h JOIN versions v ON v.version_id = h.version_id AND v.owner_id = h.owner_id
            WHERE h.owner_id = \(ownerID) \(tresor)AND h.sequence > \(Int64(bitPattern: since)) ORDER BY h.sequence LIMIT \(Int64(limit))
            """
    }

    /// The newest commitments of an owner's tresors (only `tresorID`'s when given).
    static func commitments(ownerID: UUID, tresorID: UUID?) -> SQLStatement {
        let tresor: SQLStatement = if let tresorID { " AND tresor_id = \(tresorID)" } else { "" }
        return "SELECT tresor_id, sequence, statement FROM tresor_commitments WHERE owner_id = \(ownerID)\(tresor) ORDER BY tresor_id"
    }

    /// The stored commitment's sequence of a tresor, as `value`.
    static func commitmentSequence(_ tresorID: UUID) -> SQLStatement {
        "SELECT sequence AS value FROM tresor_commitments WHERE tresor_id = \(tresorID)"
    }

    /// Replaces (or stores the first) commitment of its tresor.
    static func putCommitment(_ c: CommitmentRow, owner: UUID, now: UnixMillis) -> SQLStatement {
        """
        INSERT INTO tresor_commitments (tresor_id, owner_id, sequence, statement, updated_at)
        VALUES (\(c.tresorID), \(owner), \(Int64(bitPattern: c.sequence)), \(c.json), \(now))
        ON CONFLICT (tresor_id) DO UPDATE SET sequence = excluded.sequence, statement = excluded.statement, updated_at = excluded.updated_at
        """
    }

    /// Throws `.conflict` unless `c` is above the `stored` sequence (any when none is stored). More than one
    /// above comes from a device that accepted a state this server no longer holds (a restored backup),
    /// re-sending it (Docs/design.md §5.2).
    static func check(_ c: CommitmentRow, stored: Int64?) throws {
        if let stored, c.sequence <= UInt64(bitPattern: stored) { throw CommitmentRow.stale(c, stored: UInt64(bitPattern: stored)) }
    }

    /// Checks each commitment against the stored one of its tresor (above it, or none stored) and
    /// replaces it, inside the caller's transaction (a push's); throws `.conflict` at the first stale one.
    static func replaceCommitments(_ sql: some SQLConnection, owner: UUID, _ commitments: [CommitmentRow], now: UnixMillis) async throws {
        for c in commitments {
            try check(c, stored: try await sql.row(StoredNumber.self, commitmentSequence(c.tresorID))?.value)
            try await sql.execute(putCommitment(c, owner: owner, now: now))
        }
    }

    /// The storing time of the tresor's newest head by sequence. Writes of an owner's heads are serialised
    /// under the owner's lock, so the newest by sequence is the last stored (on two instances, up to
    /// their clock skew).
    static func lastChange(ownerID: UUID, tresorID: UUID) -> SQLStatement {
        "SELECT changed_at AS value FROM heads WHERE owner_id = \(ownerID) AND tresor_id = \(tresorID) ORDER BY sequence DESC LIMIT 1"
    }
}

/// The reads of changes outside a page, written once over either engine's `SQLStore`.
protocol SQLRecordReads: RecordRepository, SQLStore {}

extension SQLRecordReads {
    public func changes(ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int) async throws -> [ChangeRow] {
        try await rows(ChangeRow.self, RecordSQL.changes("h.sequence, v.envelope", ownerID: ownerID, tresorID: tresorID, since: since, limit: limit))
    }

    public func tresorsOutOfStep(ownerID: UUID) async throws -> Set<UUID> {
        Set(
            try await rows(CommitmentWithState.self, TresorStateSQL.commitmentsWithStates(owner: ownerID)).filter { !$0.describesState }.map(
                \.tresorID
            )
        )
    }

    public func lastChange(ownerID: UUID, tresorID: UUID) async throws -> UnixMillis? {
        try await row(StoredNumber.self, RecordSQL.lastChange(ownerID: ownerID, tresorID: tresorID))?.value
    }
}
