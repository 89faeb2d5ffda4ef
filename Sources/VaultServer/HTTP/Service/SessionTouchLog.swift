import Synchronization
import VaultCore

/// When this process last recorded each session's use, so that a busy session costs one database write a
/// minute rather than one per request. Several instances each write at most once a minute per session.
final class SessionTouchLog: Sendable {
    private let last = Mutex<[String: UnixMillis]>([:])
    /// Forgets everything past this many sessions, so the memory stays bounded; the cost is one extra write each.
    static let capacity = 10_000

    /// Whether `tokenHash`'s use at `now` should be written: true at most once per `interval` milliseconds.
    func shouldRecord(_ tokenHash: String, now: UnixMillis, interval: Int64) -> Bool {
        last.withLock { seen in
            if let t = seen[tokenHash], now >= t, now - t < interval { return false }
            if seen.count >= Self.capacity { seen.removeAll(keepingCapacity: true) }
            seen[tokenHash] = now
            return true
        }
    }
}
