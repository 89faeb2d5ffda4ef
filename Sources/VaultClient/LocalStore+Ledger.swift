import Foundation
import GRDB
import VaultCore

/// What this device knows of one tresor beyond its keys (Docs/design.md §3): the patient's ledger of
/// members, the newest tresor version the server has confirmed or shown, and the newest epoch this device
/// has seen in anything the patient signed. The last two are high-water marks that only grow: a server
/// that later shows less is caught (a rolled-back self-grant, a hidden epoch). Kept in `tresor_marks`.
struct TresorLedgerState: Sendable, Equatable {
    /// A tresor this device knows nothing of yet beyond its keys.
    static let none = TresorLedgerState(ledger: TresorLedger(version: 0), seenVersion: 0, topEpoch: 0)

    /// The ledger as this device holds it; its version is ahead of `seenVersion` while a change waits to
    /// be declared.
    var ledger: TresorLedger
    /// The newest tresor version the server confirmed or served, with a valid patient signature.
    var seenVersion: UInt64
    /// The newest epoch seen in a self-grant or in a record's signed header.
    var topEpoch: UInt32
}

/// The two high-water marks of a tresor's ledger state.
struct LedgerMarks: Sendable, Equatable {
    var seenVersion: UInt64 = 0
    var topEpoch: UInt32 = 0

    /// True when `other` is higher in either mark.
    func isBehind(_ other: TresorLedgerState) -> Bool { other.seenVersion > seenVersion || other.topEpoch > topEpoch }
}

extension LocalStore {
    /// Ledgers and high-water marks per tresor, added after the first schema.
    static let ledgerTable = DeviceDatabase.Migration(
        "v3-tresor-ledger",
        sql: """
            CREATE TABLE tresor_marks (
                tresor_id TEXT PRIMARY KEY,
                category TEXT NOT NULL UNIQUE,
                ledger_version INTEGER NOT NULL,
                seen_version INTEGER NOT NULL,
                top_epoch INTEGER NOT NULL,
                members BLOB NOT NULL);
            """
    )

    /// The ledger state of `category`'s tresor, or nil when this device has none yet.
    func ledgerState(category: String) throws -> TresorLedgerState? {
        try queue.read { db in try Transaction(db: db).ledgerState(category: category) }
    }

    /// Every category this device keeps a ledger state for.
    func ledgerCategories() throws -> [String] {
        try queue.read { db in try String.fetchAll(db, sql: "SELECT category FROM tresor_marks ORDER BY category") }
    }

    /// The high-water marks (seen version, top epoch) of every category, as committed now.
    func ledgerMarks() throws -> [String: LedgerMarks] {
        try queue.read { db in
            var marks: [String: LedgerMarks] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT category, seen_version, top_epoch FROM tresor_marks") {
                marks[row["category"]] = LedgerMarks(
                    seenVersion: UInt64(row["seen_version"] as Int64),
                    topEpoch: UInt32(clamping: row["top_epoch"] as Int64)
                )
            }
            return marks
        }
    }

    /// Stores `ledgerState` for `category`; the seen version and top epoch never go down.
    func saveLedgerState(_ ledgerState: TresorLedgerState, category: String, tresorID: UUID) throws {
        try write { tx in try tx.saveLedgerState(ledgerState, category: category, tresorID: tresorID) }
    }
}

extension LocalStore.Transaction {
    func ledgerState(category: String) throws -> TresorLedgerState? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM tresor_marks WHERE category = ?"), arguments: [category]) else {
            return nil
        }
        let members = try LocalStore.decoder.decode([LedgerMember].self, from: row["members"] as Data)
        return TresorLedgerState(
            ledger: TresorLedger(
                version: UInt64(row["ledger_version"] as Int64),
                members: Dictionary(members.map { ($0.shareID, $0) }) { a, _ in a }
            ),
            seenVersion: UInt64(row["seen_version"] as Int64),
            topEpoch: UInt32(clamping: row["top_epoch"] as Int64)
        )
    }

    func saveLedgerState(_ ledgerState: TresorLedgerState, category: String, tresorID: UUID) throws {
        let members = try LocalStore.encoder.encode(ledgerState.ledger.members.values.sorted { $0.shareID.uuidString < $1.shareID.uuidString })
        try db.execute(
            sql: """
                INSERT INTO tresor_marks (tresor_id, category, ledger_version, seen_version, top_epoch, members) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (tresor_id) DO UPDATE SET ledger_version = excluded.ledger_version,
                    seen_version = max(seen_version, excluded.seen_version), top_epoch = max(top_epoch, excluded.top_epoch),
                    members = excluded.members
                """,
            arguments: [
                tresorID.uuidString, category, Int64(clamping: ledgerState.ledger.version), Int64(clamping: ledgerState.seenVersion),
                Int64(ledgerState.topEpoch), members,
            ]
        )
    }

    /// Raises the newest epoch seen for `category` to `epoch` (from a record's verified header).
    func raiseTopEpoch(_ epoch: UInt32, category: String, tresorID: UUID) throws {
        try db.execute(
            sql: """
                INSERT INTO tresor_marks (tresor_id, category, ledger_version, seen_version, top_epoch, members) VALUES (?, ?, 0, 0, ?, '[]')
                ON CONFLICT (tresor_id) DO UPDATE SET top_epoch = max(top_epoch, excluded.top_epoch)
                """,
            arguments: [tresorID.uuidString, category, Int64(epoch)]
        )
    }
}

/// A revocation this device decided and has not finished (Docs/design.md §3.1): the members are already
/// *revoked* in the ledger; what may still be owed is the signed statement to the server (per share) and the
/// rotation (per category). Kept until each is done, so an interrupted `share revoke` is finished by the next
/// sync instead of leaving the doctor open.
struct OwedRevocation: Sendable, Equatable {
    var shareID: UUID
    var category: String
    /// The share's request, as the patient signed it (the revocation names its hash), JSON.
    var request: Grant
}

extension LocalStore {
    /// Revocations decided and not finished, added after the ledger.
    static let owedRevocationsTable = DeviceDatabase.Migration(
        "v6-owed-revocations",
        sql: """
            CREATE TABLE owed_revocations (share_id TEXT PRIMARY KEY, category TEXT NOT NULL, request BLOB NOT NULL);
            CREATE TABLE owed_rotations (category TEXT PRIMARY KEY);
            """
    )

    /// Records `members` as revoked in `category`'s ledger and, in the same transaction, that their
    /// statements and a rotation of the category are owed.
    func decideRevocation(_ members: [(LedgerMember, Grant)], category: String, tresorID: UUID) throws {
        try write { tx in
            var ledgerState = try tx.ledgerState(category: category) ?? TresorLedgerState.none
            for (member, request) in members {
                ledgerState.ledger.record(member)
                try tx.db.execute(
                    sql: "INSERT OR REPLACE INTO owed_revocations (share_id, category, request) VALUES (?, ?, ?)",
                    arguments: [member.shareID.uuidString, category, try LocalStore.encoder.encode(request)]
                )
            }
            try tx.saveLedgerState(ledgerState, category: category, tresorID: tresorID)
            try tx.db.execute(sql: "INSERT OR IGNORE INTO owed_rotations (category) VALUES (?)", arguments: [category])
        }
    }

    /// The statements still owed.
    func owedRevocations() throws -> [OwedRevocation] {
        try read { tx in
            try Row.fetchAll(tx.db, sql: "SELECT * FROM owed_revocations ORDER BY category, share_id").compactMap { row in
                guard let id = UUID(uuidString: row["share_id"]) else { return nil }
                let request = try LocalStore.decoder.decode(Grant.self, from: row["request"] as Data)
                return OwedRevocation(shareID: id, category: row["category"], request: request)
            }
        }
    }

    /// The categories whose rotation is still owed.
    func owedRotations() throws -> [String] {
        try read { tx in try String.fetchAll(tx.db, sql: "SELECT category FROM owed_rotations ORDER BY category") }
    }

    /// Marks the statement of `shareID` delivered to the server.
    func revocationSent(_ shareID: UUID) throws {
        try write { tx in try tx.db.execute(sql: "DELETE FROM owed_revocations WHERE share_id = ?", arguments: [shareID.uuidString]) }
    }

    /// Marks the rotation of `category` done.
    func rotationDone(_ category: String) throws {
        try write { tx in try tx.db.execute(sql: "DELETE FROM owed_rotations WHERE category = ?", arguments: [category]) }
    }
}
