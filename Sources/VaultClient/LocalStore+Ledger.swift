import Foundation
import GRDB
import VaultCore

/// What this device knows of one tresor beyond its keys (Docs/design.md §3): the patient's ledger of
/// members, the newest tresor version the server has confirmed or shown, and the newest epoch this device
/// has seen in anything the patient signed. The last two only grow: a server that later shows less is
/// caught (a rolled-back self-grant, a hidden epoch).
struct TresorMarks: Sendable, Equatable {
    /// The ledger as this device holds it; its version is ahead of `seenVersion` while a change waits to
    /// be declared.
    var ledger: TresorLedger
    /// The newest tresor version the server confirmed or served, with a valid patient signature.
    var seenVersion: UInt64
    /// The newest epoch seen in a self-grant or in a record's signed header.
    var topEpoch: UInt32
}

extension LocalStore {
    /// Ledgers and high-water marks per tresor, added after the first schema.
    static let ledgerTable = DatabaseMigrator.later(
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

    /// The marks of `category`'s tresor, or nil when this device has none yet.
    func marks(category: String) throws -> TresorMarks? {
        try queue.read { db in try Transaction(db: db).marks(category: category) }
    }

    /// Every category this device holds marks for.
    func markedCategories() throws -> [String] {
        try queue.read { db in try String.fetchAll(db, sql: "SELECT category FROM tresor_marks ORDER BY category") }
    }

    /// Stores `marks` for `category`; the seen version and top epoch never go down.
    func saveMarks(_ marks: TresorMarks, category: String, tresorID: UUID) throws {
        try write { tx in try tx.saveMarks(marks, category: category, tresorID: tresorID) }
    }
}

extension LocalStore.Transaction {
    func marks(category: String) throws -> TresorMarks? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM tresor_marks WHERE category = ?"), arguments: [category]) else {
            return nil
        }
        let members = try LocalStore.decoder.decode([LedgerMember].self, from: row["members"] as Data)
        return TresorMarks(
            ledger: TresorLedger(
                version: UInt64(row["ledger_version"] as Int64),
                members: Dictionary(members.map { ($0.shareID, $0) }) { a, _ in a }
            ),
            seenVersion: UInt64(row["seen_version"] as Int64),
            topEpoch: UInt32(clamping: row["top_epoch"] as Int64)
        )
    }

    func saveMarks(_ marks: TresorMarks, category: String, tresorID: UUID) throws {
        let members = try LocalStore.encoder.encode(marks.ledger.members.values.sorted { $0.shareID.uuidString < $1.shareID.uuidString })
        try db.execute(
            sql: """
                INSERT INTO tresor_marks (tresor_id, category, ledger_version, seen_version, top_epoch, members) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (tresor_id) DO UPDATE SET ledger_version = excluded.ledger_version,
                    seen_version = max(seen_version, excluded.seen_version), top_epoch = max(top_epoch, excluded.top_epoch),
                    members = excluded.members
                """,
            arguments: [
                tresorID.uuidString, category, Int64(clamping: marks.ledger.version), Int64(clamping: marks.seenVersion),
                Int64(marks.topEpoch), members,
            ]
        )
    }

    /// Raises the newest epoch seen for `category` to `epoch` (from a record's verified header).
    func noteEpoch(_ epoch: UInt32, category: String, tresorID: UUID) throws {
        try db.execute(
            sql: """
                INSERT INTO tresor_marks (tresor_id, category, ledger_version, seen_version, top_epoch, members) VALUES (?, ?, 0, 0, ?, '[]')
                ON CONFLICT (tresor_id) DO UPDATE SET top_epoch = max(top_epoch, excluded.top_epoch)
                """,
            arguments: [tresorID.uuidString, category, Int64(epoch)]
        )
    }
}
