import Foundation
import NIOConcurrencyHelpers

/// Limits registrations per client address in a fixed window, so that one client cannot fill the
/// admin's queue or the database with pending accounts. Every attempt counts, accepted or not.
final class RegistrationRateLimiter: Sendable {
    struct Limits: Sendable {
        /// Attempts per address and window.
        var perAddress = 20
        var windowMs: Int64 = 60 * 60 * 1000
        /// Addresses kept before expired windows are dropped.
        var maxEntries = 100_000
    }

    private struct Window {
        var start: Int64
        var count: Int
    }

    let limits: Limits
    private let windows = NIOLockedValueBox<[String: Window]>([:])

    init(limits: Limits = Limits()) { self.limits = limits }

    /// Counts an attempt from `address`: nil when it may go ahead, else milliseconds until it may.
    func attempt(address: String, now: Int64) -> Int64? {
        windows.withLockedValue { map in
            if map.count > limits.maxEntries { map = map.filter { now - $0.value.start < limits.windowMs } }
            var w = map[address].flatMap { now - $0.start < limits.windowMs ? $0 : nil } ?? Window(start: now, count: 0)
            guard w.count < limits.perAddress else { return w.start + limits.windowMs - now }
            w.count += 1
            map[address] = w
            return nil
        }
    }
}
