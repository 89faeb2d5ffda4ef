import Foundation
import GRDB

/// What a view reads of the cache: the live heads of a share, a page at a time.
extension DoctorCache {
    /// A live head of a share as a view reads it: what `take` gave for its version id, or its envelope.
    enum LiveHead<Taken: Sendable>: Sendable {
        case taken(Taken)
        case sealed(Data)
    }

    /// Up to `limit` live records of one share, in record id order after the record id `after` ("" for the
    /// first page), each as what `take` gives for its version id or else as its stored envelope (binary),
    /// with the record id of the last; nil when none is left. A view decrypts a page at a time, so the
    /// cached bytes of a large share are never all in memory at once.
    func liveHeads<Taken: Sendable>(
        owner: UUID,
        tresor: UUID,
        after: String,
        limit: Int,
        take: @escaping @Sendable (String) -> Taken? = { _ in nil }
    ) async throws -> (heads: [LiveHead<Taken>], last: String)? {
        try await queue.read { db in
            // While a first read of the patient is parked, every head held of the patient is one of its
            // records, not yet authenticated (DoctorCache+Parked.swift): none is shown.
            guard try Self.parkedTresor(db, owner: owner.uuidString) == nil else { return nil }
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT record_id, version_id, envelope FROM shared_records
                    WHERE owner_id = ? AND record_id > ? AND tresor_id = ? AND deleted = 0 ORDER BY record_id LIMIT ?
                    """,
                arguments: [owner.uuidString, after, tresor.uuidString, limit]
            )
            var heads: [LiveHead<Taken>] = []
            var last: String?
            while let row = try rows.next() {
                last = row[0]
                // The envelope is copied out only when no record of its version was handed over.
                if let version = row[1] as String?, let taken = take(version) { heads.append(.taken(taken)) } else { heads.append(.sealed(row[2])) }
            }
            return last.map { (heads, $0) }
        }
    }
}
