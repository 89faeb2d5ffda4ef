import Foundation
import VaultCore

/// Slows password guessing with an exponential back-off after failed logins, per client address and
/// per username, and caps successful logins per account (Docs/design.md §2). After a few free failures
/// each further one doubles the wait before the next attempt is looked at (1 s, 2 s, 4 s, … up to a
/// ceiling); attempts during the wait are refused with 429 and neither checked nor counted.
///
/// An attempt is admitted and counted in one atomic step before its key is checked (`admit`): it counts
/// as a failure until `succeeded` takes that back, so attempts sent together meet the back-off one after
/// another instead of all being checked against the count before any of them. The same step counts it
/// against the account's successful logins, which `failed` takes back.
///
/// The username's back-off does not apply from an address that user has logged in from before, so
/// someone guessing a user's password from elsewhere cannot lock the user out of their usual device;
/// guesses from that address still meet the address's own back-off. The counts live in the database
/// (`login_throttle`), so every instance behind a load balancer sees the same attempts: guesses spread
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
        /// Successful proofs (logins, recovery proofs, password checks) of one account per window.
        var successesPerWindow: Int64 = 20
        /// The window of `successesPerWindow`, from the first success in it.
        var successWindowMs: Int64 = 10 * 60 * 1000
    }

    /// An admitted attempt: its keys, to settle once the key is checked.
    struct Attempt: Sendable {
        let username: String
        let address: String
        /// Counted against the successful-login cap (not a recovery proof).
        var capped = true
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
    /// Successful proofs are counted per account and address: someone who knows the password cannot use up
    /// the owner's logins from elsewhere.
    static func successKey(_ username: String, _ address: String) -> String { "s:" + username + "\n" + address }

    /// The wait after `count` failures of which `free` cost nothing.
    func delay(afterFailures count: Int64, free: Int) -> Int64 {
        // The count is read from the database: checked, so an edited row cannot trap the server.
        let (excess, overflow) = count.subtractingReportingOverflow(Int64(free))
        guard !overflow, excess > 0 else { return overflow ? limits.maxDelayMs : 0 }
        let doublings = min(excess - 1, 40)
        return min(limits.maxDelayMs, limits.baseDelayMs << doublings)
    }

    /// Why an attempt was not admitted, and for how long.
    enum Refusal: Error, Equatable {
        /// Failed attempts for this username or from this address: the back-off's wait.
        case backOff(waitMs: Int64)
        /// The account's successful logins of this window are used up.
        case tooManySuccesses(waitMs: Int64)
    }

    /// Admits an attempt at `username` from `address` and counts it, or throws `Refusal` with the wait,
    /// counting nothing. One atomic step, so attempts racing each other are decided one after another.
    /// `capped`: false for a recovery proof, which the successful-login cap never blocks (the owner's way back
    /// must stay open whatever a password holder does).
    func admit(username: String, address: String, now: UnixMillis, capped: Bool = true) async throws -> Attempt {
        let (u, a, t) = (Self.usernameKey(username), Self.addressKey(address), Self.pairKey(username, address))
        let s = Self.successKey(username, address)
        let limits = self.limits
        let refusal: Refusal? = try await repository.updateLoginThrottle(keys: [u, a, t, s], now: now) { rows in
            let byKey = Dictionary(rows.map { ($0.key, $0) }, uniquingKeysWith: { a, _ in a })
            var checks = [(a, limits.freeAddressFailures)]
            if byKey[t] == nil { checks.append((u, limits.freeUsernameFailures)) }
            let wait =
                checks.compactMap { key, free -> Int64? in
                    byKey[key].map { $0.lastFailure.saturating(plus: self.delay(afterFailures: $0.failures, free: free)).saturating(minus: now) }
                }.max() ?? 0
            if wait > 0 { return ([], .backOff(waitMs: wait)) }
            if capped, let used = byKey[s], used.failures >= limits.successesPerWindow {
                return ([], .tooManySuccesses(waitMs: max(1, used.expiresAt.saturating(minus: now))))
            }
            let failures = [u, a].map { key in
                let row = byKey[key]
                return LoginThrottleRow(
                    key: key,
                    failures: (row?.failures ?? 0).saturating(plus: 1),
                    lastFailure: now,
                    expiresAt: max(row?.expiresAt ?? 0, now + limits.forgetAfterMs)
                )
            }
            let success = byKey[s].map {
                LoginThrottleRow(key: s, failures: $0.failures.saturating(plus: 1), lastFailure: now, expiresAt: $0.expiresAt)
            }
            guard capped else { return (failures, nil) }
            return (failures + [success ?? LoginThrottleRow(key: s, failures: 1, lastFailure: now, expiresAt: now + limits.successWindowMs)], nil)
        }
        if let refusal { throw refusal }
        return Attempt(username: username, address: address, capped: capped)
    }

    /// The attempt's key was wrong: it stays counted as a failure, and no longer as a success.
    func failed(_ attempt: Attempt, now: UnixMillis) async throws {
        guard attempt.capped else { return }
        let s = Self.successKey(attempt.username, attempt.address)
        try await repository.updateLoginThrottle(keys: [s], now: now) { rows in
            (
                rows.map {
                    LoginThrottleRow(
                        key: $0.key,
                        failures: max(0, $0.failures.saturating(minus: 1)),
                        lastFailure: $0.lastFailure,
                        expiresAt: $0.expiresAt
                    )
                }, ()
            )
        }
    }

    /// The attempt's key was right: it is no longer counted as a failure, and its address is exempt from
    /// the username's back-off. The username's earlier failures stay: clearing them would hand someone
    /// guessing elsewhere a fresh set of free failures whenever the user logs in.
    func succeeded(_ attempt: Attempt, now: UnixMillis) async throws {
        let (u, a, t) = (Self.usernameKey(attempt.username), Self.addressKey(attempt.address), Self.pairKey(attempt.username, attempt.address))
        let trust = LoginThrottleRow(key: t, failures: 0, lastFailure: 0, expiresAt: now + limits.trustAfterLoginMs)
        try await repository.updateLoginThrottle(keys: [u, a, t], now: now) { rows in
            let released = rows.filter { $0.key != t }.map {
                LoginThrottleRow(
                    key: $0.key,
                    failures: max(0, $0.failures.saturating(minus: 1)),
                    lastFailure: $0.lastFailure,
                    expiresAt: $0.expiresAt
                )
            }
            let kept = rows.first { $0.key == t }.map { max($0.expiresAt, trust.expiresAt) } ?? trust.expiresAt
            return (released + [LoginThrottleRow(key: t, failures: 0, lastFailure: 0, expiresAt: kept)], ())
        }
    }
}

extension Int64 {
    /// `self + other`, held at the bounds instead of trapping: throttle rows are read from the database.
    func saturating(plus other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// `self - other`, held at the bounds instead of trapping.
    func saturating(minus other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? (other > 0 ? .min : .max) : difference
    }
}
