import Foundation
import NIOConcurrencyHelpers

/// Slows password guessing with an exponential back-off after failed logins, per client address and
/// per username (Docs/design.md §2). After a few free failures each further one doubles the wait
/// before the next attempt is looked at (1 s, 2 s, 4 s, … up to a ceiling); attempts during the wait
/// are refused with 429 and neither checked nor counted.
///
/// The username's back-off does not apply from an address that user has logged in from before, so
/// someone guessing a user's password from elsewhere cannot lock the user out of their usual device;
/// guesses from that address still meet the address's own back-off. The counts live in this server
/// process: behind a load balancer each instance slows guessing on its own.
final class LoginRateLimiter: Sendable {
    struct Limits: Sendable {
        /// Failures of one username before its back-off starts.
        var freeUsernameFailures = 3
        /// Failures from one address (any username) before its back-off starts; higher, since several
        /// people may share an address.
        var freeAddressFailures = 10
        /// The first wait; each further failure doubles it.
        var baseDelayMs: Int64 = 1_000
        /// The longest wait.
        var maxDelayMs: Int64 = 15 * 60 * 1000
        /// Failures are forgotten after this long without another one.
        var forgetAfterMs: Int64 = 60 * 60 * 1000
        /// How long a successful login exempts its address from that username's back-off.
        var trustAfterLoginMs: Int64 = 30 * 24 * 3_600 * 1000
        /// Entries kept before expired ones are dropped.
        var maxEntries = 100_000
    }

    private struct Failures {
        var count: Int
        var last: Int64
    }

    private struct State {
        var failures: [String: Failures] = [:]
        /// Username and address pairs that logged in, with the time the exemption ends.
        var trusted: [String: Int64] = [:]
    }

    let limits: Limits
    private let state = NIOLockedValueBox(State())

    init(limits: Limits = Limits()) { self.limits = limits }

    private static func usernameKey(_ username: String) -> String { "u:" + username }
    private static func addressKey(_ address: String) -> String { "a:" + address }
    private static func pairKey(_ username: String, _ address: String) -> String { username + "\n" + address }

    /// The wait after `count` failures of which `free` cost nothing.
    func delay(afterFailures count: Int, free: Int) -> Int64 {
        let excess = count - free
        guard excess > 0 else { return 0 }
        let doublings = Int64(min(excess - 1, 40))
        return min(limits.maxDelayMs, limits.baseDelayMs << doublings)
    }

    /// Milliseconds until another attempt is allowed, or nil when it is allowed now.
    func retryAfter(username: String, address: String, now: Int64) -> Int64? {
        state.withLockedValue { s in
            var checks = [(Self.addressKey(address), limits.freeAddressFailures)]
            if (s.trusted[Self.pairKey(username, address)] ?? 0) <= now {
                checks.append((Self.usernameKey(username), limits.freeUsernameFailures))
            }
            let wait =
                checks.compactMap { key, free -> Int64? in
                    guard let f = s.failures[key], now - f.last < limits.forgetAfterMs else { return nil }
                    return f.last + delay(afterFailures: f.count, free: free) - now
                }.max() ?? 0
            return wait > 0 ? wait : nil
        }
    }

    func recordFailure(username: String, address: String, now: Int64) {
        state.withLockedValue { s in
            for key in [Self.usernameKey(username), Self.addressKey(address)] {
                let previous = s.failures[key].flatMap { now - $0.last < limits.forgetAfterMs ? $0.count : nil } ?? 0
                s.failures[key] = Failures(count: previous + 1, last: now)
            }
            prune(&s, now: now)
        }
    }

    /// Exempts `address` from `username`'s back-off. The username's count stays: clearing it would hand
    /// someone guessing elsewhere a fresh set of free failures whenever the user logs in.
    func recordSuccess(username: String, address: String, now: Int64) {
        state.withLockedValue { s in
            s.trusted[Self.pairKey(username, address)] = now + limits.trustAfterLoginMs
            prune(&s, now: now)
        }
    }

    private func prune(_ s: inout State, now: Int64) {
        if s.failures.count > limits.maxEntries { s.failures = s.failures.filter { now - $0.value.last < limits.forgetAfterMs } }
        if s.trusted.count > limits.maxEntries { s.trusted = s.trusted.filter { $0.value > now } }
    }
}
