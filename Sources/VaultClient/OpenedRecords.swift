import Foundation
import Synchronization
import VaultCore

/// The records a doctor's refresh opened (decrypted and parsed) as it checked them, by version id, handed
/// to the view that follows it (`DoctorReader.view`), so that a record pulled and shown at once is opened
/// once. A version id is the hash of the envelope's bytes (Docs/envelope-v1.md §4.3), so a cached head with
/// that id holds exactly the bytes opened here, under the same keys and context: what the view would open
/// from the cache. The view takes only the records of heads the cache holds once the refresh is done (a
/// record opened here and then held aside, replaced or not vouched for is never asked for) and opens the
/// rest from the cache as before.
final class OpenedRecords: Sendable {
    /// How many records one refresh keeps (the view then holds them all anyway): a share larger than this
    /// has its later records opened again by the view, and what is kept beside the view's own stays bounded.
    static let capacity = 10_000

    private let records = Mutex<[String: CareRecord]>([:])

    /// Keeps `record`, opened from the envelope of version `versionID`, unless `capacity` are kept.
    func keep(_ versionID: String, _ record: CareRecord) {
        records.withLock { kept in
            if kept.count < Self.capacity { kept[versionID] = record }
        }
    }

    /// The record opened from the envelope of version `versionID`, if kept, which is kept no more.
    func take(_ versionID: String) -> CareRecord? {
        records.withLock { $0.removeValue(forKey: versionID) }
    }
}
