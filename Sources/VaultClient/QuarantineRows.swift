import Foundation
import GRDB
import VaultCore

/// The quarantine of one replica's feed (Docs/design.md §5), the same rules in a patient's store and a
/// doctor's cache: one row per change sequence, a newer failed version of a record in place of the older
/// ones, and a verified version of a record or a sequence that holds no change any more taking them out.
/// A patient's store follows one feed, so its rows name no owner; a doctor's cache follows one feed per
/// share, and every row, and every statement, names the feed's owner and tresor: a row is held, released
/// and listed by the feed of its share only, so a change another share's page carries (the server chooses
/// what each page holds) can neither overwrite nor release it.
struct QuarantineRows {
    let db: Database
    /// The owner and tresor of the feed, in a table that holds several feeds.
    let feed: (owner: String, tresor: String)?

    /// `WHERE` clause prefix and arguments that keep a statement to the feed's owner and tresor.
    private var scope: (sql: String, arguments: [any DatabaseValueConvertible]) {
        guard let feed else { return ("", []) }
        return ("owner_id = ? AND tresor_id = ? AND ", [feed.owner, feed.tresor])
    }

    /// Keeps a record aside in place of any older quarantined version of it: the server's head of that
    /// record is now at `entry.sequence`.
    func hold(_ entry: QuarantinedRecord) throws {
        guard let sequence = Int64(exactly: entry.sequence) else { throw ClientError.integrity("the server sent an impossible sequence number") }
        if let recordID = entry.recordID { try release(recordID: recordID) }
        let values: [any DatabaseValueConvertible] = [sequence, entry.recordID, entry.versionID, entry.reason.rawValue]
        if let feed {
            try db.cachedStatement(
                sql: "INSERT OR REPLACE INTO quarantine (owner_id, tresor_id, sequence, record_id, version_id, reason) VALUES (?, ?, ?, ?, ?, ?)"
            ).execute(arguments: StatementArguments([feed.owner, feed.tresor] + values))
        } else {
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO quarantine (sequence, record_id, version_id, reason) VALUES (?, ?, ?, ?)")
                .execute(arguments: StatementArguments(values))
        }
    }

    /// Whether the feed holds any quarantined record (most of the time none is, and nothing needs releasing).
    func holdsAny() throws -> Bool {
        let (where_, arguments) = scope
        let sql = "SELECT EXISTS (SELECT 1 FROM quarantine WHERE \(where_)1 = 1)"
        return try Bool.fetchOne(db.cachedStatement(sql: sql), arguments: StatementArguments(arguments)) ?? false
    }

    /// Takes the record at `sequence` out of quarantine (no change is there any more, or it verified).
    func release(sequence: UInt64) throws {
        guard let sequence = Int64(exactly: sequence) else { return }
        let (where_, arguments) = scope
        try db.cachedStatement(sql: "DELETE FROM quarantine WHERE \(where_)sequence = ?").execute(
            arguments: StatementArguments(arguments + [sequence])
        )
    }

    /// Takes every quarantined version of a record out of quarantine (a verified version supersedes them).
    func release(recordID: String) throws {
        let (where_, arguments) = scope
        try db.cachedStatement(sql: "DELETE FROM quarantine WHERE \(where_)record_id = ?").execute(
            arguments: StatementArguments(arguments + [recordID])
        )
    }

    /// The feed's quarantined records, by sequence.
    func all() throws -> [QuarantinedRecord] {
        let (where_, arguments) = scope
        let sql = "SELECT sequence, record_id, version_id, reason FROM quarantine WHERE \(where_)1 = 1 ORDER BY sequence"
        return try Row.fetchAll(db.cachedStatement(sql: sql), arguments: StatementArguments(arguments)).map(QuarantinedRecord.init(row:))
    }
}
