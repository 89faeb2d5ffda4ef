import Foundation
import GRDB
import VaultCore

/// How both readers keep their copy of the server's heads of a tresor (Docs/envelope-v1.md §3.4): a row
/// with the heads' LtHash state, counts and newest HLC, and the newest state commitment accepted. A
/// patient's store keys it by tresor (`server_state`), a doctor's cache by patient and tresor (`share_state`).
enum HeadCopyRow {
    /// The columns every such row has after its key.
    static let columns = ["state", "live", "deleted", "hlc_physical", "hlc_counter", "hlc_device", "commitment"]

    /// Writes `set` and `commitment` into the row of `table` whose primary key is `key` (columns and values,
    /// in order), with the `extra` columns of that table.
    static func save(
        _ db: Database,
        table: String,
        key: [(column: String, value: any DatabaseValueConvertible)],
        set: HeadSet,
        commitment: StateCommitment?,
        extra: [(column: String, value: any DatabaseValueConvertible)] = []
    ) throws {
        let written = columns + extra.map(\.column)
        let all = key.map(\.column) + written
        let sql = """
            INSERT INTO \(table) (\(all.joined(separator: ", "))) VALUES (\(all.map { _ in "?" }.joined(separator: ", ")))
            ON CONFLICT (\(key.map(\.column).joined(separator: ", "))) DO UPDATE SET \(written.map { "\($0) = excluded.\($0)" }.joined(separator: ", "))
            """
        let values: [any DatabaseValueConvertible] = [
            Data(set.hash.bytes), Int64(bitPattern: set.live), Int64(bitPattern: set.deleted), Int64(clamping: set.newest.physicalMs),
            Int64(set.newest.counter), set.newest.deviceID, commitment?.storedForm,
        ]
        try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(key.map(\.value) + values + extra.map(\.value)))
    }
}
