import Foundation
import Hummingbird
import NIOConcurrencyHelpers
import ServiceLifecycle
import VaultAPI
import VaultCore
import VaultCrypto

/// The in-process hub of live events (Docs/events.md): numbers every notice this process hears, keeps
/// the last ones for resuming streams, hands each to the streams it concerns, beats their hearts, and
/// enforces the caps. The service layer publishes after a change is committed; on PostgreSQL a relay
/// (`PostgresEventRelay`) carries the notice through the database to every instance, this one included,
/// and on SQLite it is delivered here at once. As a service of the application it ends every stream
/// when the server shuts down, so that open streams do not hold the shutdown up.
public final class EventHub: Service, Sendable {
    public struct Limits: Sendable {
        /// Open streams per account (429 past it).
        public var perAccount = 8
        /// Open streams on this instance (503 past it).
        public var perInstance = 256
        /// Events kept for resuming (`Last-Event-ID`).
        public var resumeBuffer = 1_024
        /// Events waiting for one slow stream before they are replaced by a `resync`.
        public var queue = 64
        public var heartbeat: Duration = LiveEvent.heartbeatInterval
        /// A stream ends after this long; its client reconnects with `Last-Event-ID`.
        public var lifetime: Duration = .seconds(3_600)
        /// A full instance ends a stream for a newcomer only once it is this old, so that an account cannot
        /// make others churn by opening and closing (each reconnection makes a client pull everything).
        public var evictableAfter: Duration = .seconds(60)

        public init(perAccount: Int = 8, perInstance: Int = 256) {
            self.perAccount = perAccount
            self.perInstance = perInstance
        }
    }

    private struct State {
        var last: UInt64 = 0
        var ring: [(id: UInt64, notice: EventNotice)] = []
        var streams: [ObjectIdentifier: Subscription] = [:]
        var perAccount: [UUID: Int] = [:]
        var ticker: Task<Void, Never>?
        var closed = false
        /// Shares whose end date this process announced, with when (forgotten after a day).
        var ended: [UUID: ContinuousClock.Instant] = [:]
    }

    public let limits: Limits
    /// This process's part of every event id: 16 random hex digits.
    let instance: String
    private let state = NIOLockedValueBox(State())
    private let relay = NIOLockedValueBox<Relay?>(nil)

    /// The relay's send, inside a struct: a closure kept straight in a generic box is re-abstracted on every
    /// locked access (the `inout` goes through a pair of thunks that wrap it once more), so each publication
    /// made the stored closure one pair of thunks deeper and every later one walked the whole chain. A
    /// clinic's instances spent more time on it the more had been pushed (the growth probe found it).
    private struct Relay: Sendable {
        let send: @Sendable (EventNotice) -> Void
    }

    public init(limits: Limits = Limits()) {
        self.limits = limits
        instance = Hex.encode(RandomBytes.bytes(count: 8))
    }

    /// Announces `notice`: through the relay when there is one, else straight to this process's streams.
    func publish(_ notice: EventNotice) {
        if let relay = relay.withLockedValue({ $0 }) { relay.send(notice) } else { deliver(notice) }
    }

    /// Routes publications through `send` (the PostgreSQL relay) from now on.
    func setRelay(_ send: @escaping @Sendable (EventNotice) -> Void) { relay.withLockedValue { $0 = Relay(send: send) } }

    /// Hands a notice heard by this process to every stream it concerns.
    func deliver(_ notice: EventNotice) {
        state.withLockedValue { s in
            if case .account = notice {
                for sub in s.streams.values where sub.wants(notice) { sub.checkSession() }
                return
            }
            s.last += 1
            s.ring.append((s.last, notice))
            if s.ring.count > limits.resumeBuffer { s.ring.removeFirst(s.ring.count - limits.resumeBuffer) }
            let kind: Subscription.Outgoing.Kind
            if case let .resync(reason) = notice { kind = .resync(reason) } else { kind = .notice(notice) }
            for sub in s.streams.values where sub.wants(notice) { sub.enqueue(.init(id: s.last, kind: kind), limit: limits.queue) }
        }
    }

    /// A share reached its end date while a stream of one of its parties was open: a `share` event `expired`
    /// for this process's streams of both parties, once per process. It is not relayed: every instance
    /// sees the end date of the shares its own streams are party to (Docs/events.md §3).
    func announceEnded(_ share: UUID, _ end: Subscription.ShareEnd) {
        let first = state.withLockedValue { s in
            let now = ContinuousClock.now
            s.ended = s.ended.filter { now - $0.value < .seconds(86_400) }
            return s.ended.updateValue(now, forKey: share) == nil
        }
        if first { deliver(.share(id: share, patient: end.patient, doctor: end.doctor, state: .expired, approved: true)) }
    }

    /// The text of an event id.
    func eventID(_ n: UInt64) -> String { "\(instance)-\(n)" }

    /// Opens a stream for `account` (429 or 503 past the caps), hearing of the tresors in `watch` until
    /// their end dates by `now`. Its first events are queued already: the replay after `lastEventID` or a
    /// `resync`, then `ready`.
    func subscribe(
        account: UUID,
        tokenHash: String,
        watch: [UUID: UnixMillis],
        ends: [UUID: Subscription.ShareEnd] = [:],
        now: @escaping @Sendable () -> UnixMillis,
        lastEventID: String?
    ) throws -> Subscription {
        var evicted: Subscription?
        defer { evicted?.close() }
        return try state.withLockedValue { s in
            guard !s.closed else { throw Self.busy("the server is shutting down") }
            let mine = s.perAccount[account, default: 0]
            guard mine < limits.perAccount else {
                throw VaultService.tooManyRequests("this account has \(limits.perAccount) event streams open already", waitMs: 5_000)
            }
            if s.streams.count >= limits.perInstance {
                // Full: the account holding the most streams gives up its oldest, if it holds at least two more
                // than this one will, so that a few accounts cannot keep everyone else out (Docs/events.md §6).
                guard let victim = Self.oldestOfHeaviest(s, above: mine + 1, openedBefore: .now - limits.evictableAfter) else {
                    throw Self.busy("this server has as many event streams open as it serves")
                }
                s.streams.removeValue(forKey: ObjectIdentifier(victim))
                s.perAccount[victim.account, default: 1] -= 1
                if s.perAccount[victim.account] == 0 { s.perAccount[victim.account] = nil }
                evicted = victim
            }
            // Heartbeats spread over the interval, so that session checks do not all fall on one second.
            let phase = Duration.milliseconds(Int64(RandomBytes.uniform(UInt32(max(1, Self.milliseconds(limits.heartbeat))))))
            let sub = Subscription(account: account, tokenHash: tokenHash, watch: watch, ends: ends, now: now, firstBeat: .now + phase)
            if let lastEventID {
                for event in resume(after: lastEventID, s) where Self.concerns(event, sub) { sub.enqueue(event, limit: limits.queue) }
            }
            sub.enqueue(.init(id: s.last, kind: .ready), limit: limits.queue)
            s.streams[ObjectIdentifier(sub)] = sub
            s.perAccount[account, default: 0] += 1
            if s.ticker == nil { s.ticker = Task { [weak self] in await self?.tick() } }
            return sub
        }
    }

    /// The oldest stream of the account with the most streams, when that account holds more than `count`
    /// and that stream was opened before `openedBefore`.
    private static func oldestOfHeaviest(_ s: State, above count: Int, openedBefore: ContinuousClock.Instant) -> Subscription? {
        guard let (heaviest, held) = s.perAccount.max(by: { $0.value < $1.value }), held > count else { return nil }
        let oldest = s.streams.values.filter { $0.account == heaviest }.min { $0.openedAt < $1.openedAt }
        return oldest.flatMap { $0.openedAt < openedBefore ? $0 : nil }
    }

    /// The events after `id` if this process issued it and still holds them all, else one `resync`.
    private func resume(after id: String, _ s: State) -> [Subscription.Outgoing] {
        let parts = id.split(separator: "-", maxSplits: 1)
        guard parts.count == 2, parts[0] == instance, let n = UInt64(parts[1]), n <= s.last else {
            return [.init(id: s.last, kind: .resync("unknown-id"))]
        }
        let first = s.ring.first?.id ?? s.last + 1
        guard n + 1 >= first else { return [.init(id: s.last, kind: .resync("too-old"))] }
        return s.ring.filter { $0.id > n }.map {
            if case let .resync(reason) = $0.notice { return .init(id: $0.id, kind: .resync(reason)) }
            return .init(id: $0.id, kind: .notice($0.notice))
        }
    }

    private static func concerns(_ event: Subscription.Outgoing, _ sub: Subscription) -> Bool {
        guard case let .notice(notice) = event.kind else { return true }
        return sub.wants(notice)
    }

    /// Forgets a stream whose writer ended.
    func unsubscribe(_ sub: Subscription) {
        state.withLockedValue { s in
            guard s.streams.removeValue(forKey: ObjectIdentifier(sub)) != nil else { return }
            s.perAccount[sub.account, default: 1] -= 1
            if s.perAccount[sub.account] == 0 { s.perAccount[sub.account] = nil }
        }
        sub.close()
    }

    /// Open streams (for tests and the monitoring of this instance).
    var openStreams: Int { state.withLockedValue { $0.streams.count } }

    /// Once a second: heartbeats that are due, and the end of subscriptions whose response never started
    /// within 30 s (the connection went before the body was written). Ends when no stream is open.
    private func tick() async {
        while (try? await Task.sleep(for: .seconds(1))) != nil {
            let now = ContinuousClock.now
            let (live, stale) = state.withLockedValue { s in
                let stale = s.streams.values.filter { !$0.started && now - $0.openedAt > .seconds(30) }
                if s.streams.isEmpty { s.ticker = nil }
                return (Array(s.streams.values), stale)
            }
            if live.isEmpty { return }
            for sub in stale { unsubscribe(sub) }
            for sub in live { sub.beatIfDue(now, every: limits.heartbeat) }
        }
    }

    /// Waits for the graceful shutdown, then ends every stream and refuses new ones.
    public func run() async throws {
        try? await gracefulShutdown()
        let all = state.withLockedValue { s in
            s.closed = true
            s.ticker?.cancel()
            return Array(s.streams.values)
        }
        for sub in all { unsubscribe(sub) }
    }

    static func busy(_ message: String) -> APIError {
        var e = APIError(.serviceUnavailable, .unavailable, message + "; retry in 5 seconds")
        e.headers[.retryAfter] = "5"
        return e
    }

    static func milliseconds(_ d: Duration) -> Int64 { d.components.seconds * 1_000 + d.components.attoseconds / 1_000_000_000_000_000 }
}
