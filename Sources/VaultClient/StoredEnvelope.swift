import Foundation
import GRDB
import VaultCore

/// How the device's stores keep envelopes: in the binary encoding (Docs/envelope-v1.md §7.1), the bytes
/// the server holds and the wire carries. Stores written before that kept JSON; the first byte tells the
/// two apart (`{` against the format version 0x01), and each store converts its rows once when it opens.
enum StoredEnvelope {
    /// The envelope in `data`, binary or (written by an older version) JSON.
    static func decode(_ data: Data) throws -> Envelope {
        if data.first == UInt8(ascii: "{") { return try LocalStore.decoder.decode(Envelope.self, from: data) }
        do { return try Envelope(binary: Array(data)) } catch { throw ClientError.localState("a stored envelope is damaged: \(error)") }
    }

    /// What a store writes for `envelope`.
    static func encode(_ envelope: Envelope) -> Data { Data(envelope.binary) }

    /// A migration that rewrites in binary every envelope `table` still holds as JSON, a thousand rows per
    /// statement batch, in the migration's one transaction: a crash leaves the store as it was, and the
    /// next open converts it again. A row whose JSON does not decode any more stays as it is (reading it
    /// fails as it did before) rather than stopping the device from opening its store.
    static func conversion(_ identifier: String, tables: [String]) -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration(identifier) { db in
            for table in tables { try convert(db, table: table) }
        }
        return migrator
    }

    /// Converts the JSON rows (first byte `{`, 0x7b) of the `envelope` column of `table`.
    static func convert(_ db: Database, table: String) throws {
        let select = try db.makeStatement(
            sql: "SELECT rowid AS rid, envelope FROM \(table) WHERE substr(envelope, 1, 1) = X'7B' AND rowid > ? ORDER BY rowid LIMIT 1000"
        )
        let update = try db.makeStatement(sql: "UPDATE \(table) SET envelope = ? WHERE rowid = ?")
        var after: Int64 = 0
        while true {
            let rows = try Row.fetchAll(select, arguments: [after])
            guard let last = rows.last else { return }
            for row in rows {
                let data: Data = row["envelope"]
                guard let envelope = try? LocalStore.decoder.decode(Envelope.self, from: data) else { continue }
                try update.execute(arguments: [encode(envelope), row["rid"] as Int64])
            }
            after = last["rid"]
        }
    }
}
