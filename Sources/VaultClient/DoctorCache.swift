import Foundation
import GRDB
import VaultCore

/// The doctor's local ciphertext cache (Docs/design.md §3): the shared records of each patient, as the
/// envelopes the server sent, and a pull cursor per share (patient and tresor), so a repeated view
/// fetches only what changed. It holds no keys and no plaintext; DoctorReader verifies what goes in and
/// decrypts what comes out.
final class DoctorCache: Sendable {
    private let queue: DatabaseQueue

    init(url: URL) throws {
        queue = try SecureFiles.openDatabase(
            at: url,
            migration: "v1-doctor-cache",
            schema: """
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
    }

    /// One envelope to store: its header and the JSON it is kept as.
    struct Entry: Sendable {
        var header: RecordHeader
        var json: Data
    }

    /// The last change sequence stored for the share of `tresor` by `owner` (0 before the first view).
    func cursor(owner: UUID, tresor: UUID) async throws -> UInt64 {
        try await queue.read { db in
            let sql = "SELECT cursor FROM cursors WHERE owner_id = ? AND tresor_id = ?"
            return try Int64.fetchOne(db, sql: sql, arguments: [owner.uuidString, tresor.uuidString]).map(UInt64.init) ?? 0
        }
    }

    /// Stores one page of a share and advances its cursor to `cursor`, in one transaction. Before each
    /// envelope replaces the head held for its record, `check` sees the new header and the held head's
    /// timestamp (nil for a new record); when it throws, nothing of the page is stored.
    func store(
        _ entries: [Entry],
        owner: UUID,
        tresor: UUID,
        cursor: UInt64,
        check: @escaping @Sendable (RecordHeader, HLCTimestamp?) throws -> Void
    ) async throws {
        guard let next = Int64(exactly: cursor) else { throw ClientError.localState("a cursor beyond the cache's range") }
        let ownerID = owner.uuidString
        let tresorID = tresor.uuidString
        try await queue.write { db in
            let readHead = try db.cachedStatement(
                sql: """
                    SELECT hlc_physical, hlc_counter, hlc_device FROM shared_records WHERE owner_id = ? AND record_id = ?
                    """
            )
            let upsert = try db.cachedStatement(
                sql: """
                    INSERT INTO shared_records (owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (owner_id, record_id) DO UPDATE SET tresor_id = excluded.tresor_id, hlc_physical = excluded.hlc_physical,
                        hlc_counter = excluded.hlc_counter, hlc_device = excluded.hlc_device, deleted = excluded.deleted, envelope = excluded.envelope
                    """
            )
            for entry in entries {
                let h = entry.header
                let held = try Row.fetchOne(readHead, arguments: [ownerID, h.recordID.hex]).flatMap { LocalStore.timestamp($0[0], $0[1], $0[2]) }
                try check(h, held)
                try upsert.execute(arguments: [
                    ownerID, h.recordID.hex, tresorID, Int64(h.timestamp.physicalMs), Int64(h.timestamp.counter),
                    h.timestamp.deviceID, h.deleted, entry.json,
                ])
            }
            try db.execute(
                sql: """
                    INSERT INTO cursors (owner_id, tresor_id, cursor) VALUES (?, ?, ?)
                    ON CONFLICT (owner_id, tresor_id) DO UPDATE SET cursor = excluded.cursor
                    """,
                arguments: [ownerID, tresorID, next]
            )
        }
    }

    /// The stored envelopes (JSON) of the live records in the share of `tresor` by `owner`.
    func liveEnvelopes(owner: UUID, tresor: UUID) async throws -> [Data] {
        try await queue.read { db in
            try Data.fetchAll(
                db,
                sql: "SELECT envelope FROM shared_records WHERE owner_id = ? AND tresor_id = ? AND deleted = 0",
                arguments: [owner.uuidString, tresor.uuidString]
            )
        }
    }
}
