import Foundation
import GRDB
import VaultCore

/// How the device's stores keep envelopes: in the binary encoding (Docs/envelope-v1.md §7.1), the bytes
/// the server holds and the wire carries. Stores written before that kept JSON; each store converted its
/// rows once, when it opened (`JSONEraConversion`), so what is read now is binary only.
enum StoredEnvelope {
    /// The envelope in `data`. Bytes that are not a binary envelope (damage, or a JSON row that no longer
    /// decoded when its store was converted) are a clear error.
    static func decode(_ data: Data) throws -> Envelope {
        do { return try Envelope(binary: Array(data)) } catch { throw ClientError.localState("a stored envelope is damaged: \(error)") }
    }

    /// What a store writes for `envelope`.
    static func encode(_ envelope: Envelope) -> Data { Data(envelope.binary) }
}

/// The conversions of what stores written before the binary encoding kept as JSON (envelopes, then
/// accepted state commitments): migrations that run once per store. The JSON decoder of those versions
/// lives here and nowhere else: nothing at rest is read as JSON after them.
enum JSONEraConversion {
    /// The decoder those versions read their JSON with (a default `JSONDecoder`), frozen for the conversion.
    private static let decoder = JSONDecoder()

    /// A migration that rewrites in binary every envelope `tables` still hold as JSON, a thousand rows per
    /// statement batch, in the migration's one transaction: a crash leaves the store as it was, and the
    /// next open converts it again. A row whose JSON does not decode any more stays as it is (reading it
    /// fails, as it did before) rather than stopping the device from opening its store.
    static func envelopes(_ identifier: String, tables: [String]) -> DeviceDatabase.Migration {
        DeviceDatabase.Migration(identifier) { db in
            for table in tables {
                try convert(db, table: table, column: "envelope") { data in
                    (try? decoder.decode(Envelope.self, from: data)).map(StoredEnvelope.encode)
                }
            }
        }
    }

    /// A migration that rewrites in binary the accepted commitments `table` still holds as JSON (its
    /// `commitment` column). One that no longer decodes stays as it is, and reads as damage: forgetting it
    /// would let a server roll its tresor back unnoticed.
    static func commitments(_ identifier: String, table: String) -> DeviceDatabase.Migration {
        DeviceDatabase.Migration(identifier) { db in
            try convert(db, table: table, column: "commitment") { data in
                (try? decoder.decode(StateCommitment.self, from: data)).map(\.storedForm)
            }
        }
    }

    /// Rewrites with `binary` the JSON values (first byte `{`, 0x7b) of `column` in `table`.
    private static func convert(_ db: Database, table: String, column: String, binary: (Data) -> Data?) throws {
        let select = try db.makeStatement(
            sql: "SELECT rowid AS rid, \(column) AS value FROM \(table) WHERE substr(\(column), 1, 1) = X'7B' AND rowid > ? ORDER BY rowid LIMIT 1000"
        )
        let update = try db.makeStatement(sql: "UPDATE \(table) SET \(column) = ? WHERE rowid = ?")
        var after: Int64 = 0
        while true {
            let rows = try Row.fetchAll(select, arguments: [after])
            guard let last = rows.last else { return }
            for row in rows {
                guard let converted = binary(row["value"] as Data) else { continue }
                try update.execute(arguments: [converted, row["rid"] as Int64])
            }
            after = last["rid"]
        }
    }
}
