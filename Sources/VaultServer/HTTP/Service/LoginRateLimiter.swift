import Foundation
import NIOConcurrencyHelpers

/// Counts failed logins per username and per client address in a sliding window, and refuses further
/// attempts once either count reaches its limit. Successful logins clear the username's count.
/// The counts live in this server process: behind a load balancer each instance limits on its own,
/// which still bounds guessing to (instances × limit) per window.
final class LoginRateLimiter: Sendable {
    struct Limits: Sendable {
        var perUsername = 10
        var perAddress = 50
        var windowMs: Int64 = 15 * 60 * 1000
    }

    let limits: Limits
    private let failures = NIOLockedValueBox<[String: [Int64]]>([:])

    init(limits: Limits = Limits()) { self.limits = limits }

    /// Milliseconds until another attempt is allowed, or nil when it is allowed now.
    func retryAfter(username: String, address: String, now: Int64) -> Int64? {
        failures.withLockedValue { map in
            var wait: Int64?
            for (key, limit) in [("u:" + username, limits.perUsername), ("a:" + address, limits.perAddress)] {
                let recent = (map[key] ?? []).filter { $0 > now - limits.windowMs }
                map[key] = recent
                if recent.count >= limit, let oldest = recent.first {
                    wait = max(wait ?? 0, oldest + limits.windowMs - now)
                }
            }
            return wait
        }
    }

    func recordFailure(username: String, address: String, now: Int64) {
        failures.withLockedValue { map in
            map["u:" + username, default: []].append(now)
            map["a:" + address, default: []].append(now)
            if map.count > 100_000 { map = map.filter { $0.value.last ?? 0 > now - limits.windowMs } }
        }
    }

    func recordSuccess(username: String) {
        _ = failures.withLockedValue { $0.removeValue(forKey: "u:" + username) }
    }
}
