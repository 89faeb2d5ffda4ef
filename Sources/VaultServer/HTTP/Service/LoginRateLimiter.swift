import Foundation
import VaultCore

/// Slows password guessing with an exponential back-off after failed logins, per client address and
/// per username (Docs/design.md §2). After a few free failures each further one doubles the wait
/// before the next attempt is looked at (1 s, 2 s, 4 s, … up to a ceiling); attempts during the wait
/// are refused with 429 and neither checked nor counted.
///
/// The username's back-off does not apply from an address that user has logged in from before, so
/// someone guessing a user's password from elsewhere cannot lock the user out of their usual device;
/// guesses from that address still meet the address's own back-off. The counts live in the database
/// (`login_throttle`), so every instance behind a load balancer sees the same failures: guesses spread
/// over several instances meet one limit.
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
    }

    let limits: Limits
    let repository: any VaultRepository

    init(repository: any VaultRepository, limits: Limits = Limits()) {
        self.repository = repository
        self.limits = limits
    }

    static func usernameKey(_ username: String) -> String { "u:" + username }
    static func addressKey(_ address: String) -> String { "a:" + address }
    static func pairKey(_ username: String, _ address: String) -> String { "t:" + username + "\n" + address }

    /// The wait after `count` failures of which `free` cost nothing.
    func delay(afterFailures count: Int64, free: Int) -> Int64 {
        // The count is read from the database: checked, so an edited row cannot trap the server.
        let (excess, overflow) = count.subtractingReportingOverflow(Int64(free))
        guard !overflow, excess > 0 else { return overflow ? limits.maxDelayMs : 0 }
        let doublings = min(excess - 1, 40)
        return min(limits.maxDelayMs, limits.baseDelayMs << doublings)
    }

    /// Milliseconds until another attempt is allowed, or nil when it is allowed now.
    func retryAfter(username: String, address: String, now: Int64) async throws -> Int64? {
        let pair = Self.pairKey(username, address)
        let rows = try await repository.loginThrottle(keys: [Self.usernameKey(username), Self.addressKey(address), pair], now: now)
        let byKey = Dictionary(rows.map { ($0.key, $0) }, uniquingKeysWith: { a, _ in a })
        var checks = [(Self.addressKey(address), limits.freeAddressFailures)]
        if byKey[pair] == nil { checks.append((Self.usernameKey(username), limits.freeUsernameFailures)) }
        let wait =
            checks.compactMap { key, free -> Int64? in
                byKey[key].map { $0.lastFailure + delay(afterFailures: $0.failures, free: free) - now }
            }.max() ?? 0
        return wait > 0 ? wait : nil
    }

    func recordFailure(username: String, address: String, now: Int64) async throws {
        try await repository.recordLoginFailure(
            keys: [Self.usernameKey(username), Self.addressKey(address)],
            now: now,
            expiresAt: now + limits.forgetAfterMs
        )
    }

    /// Exempts `address` from `username`'s back-off. The username's count stays: clearing it would hand
    /// someone guessing elsewhere a fresh set of free failures whenever the user logs in.
    func recordSuccess(username: String, address: String, now: Int64) async throws {
        try await repository.recordLoginTrust(key: Self.pairKey(username, address), now: now, expiresAt: now + limits.trustAfterLoginMs)
    }
}
