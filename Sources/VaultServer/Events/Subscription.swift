import Foundation
import NIOConcurrencyHelpers
import VaultCore

/// One open event stream as the hub sees it (Docs/events.md): whom it belongs to, which tresors shared
/// with its account it hears of (each until its share's end date), the end dates of the active shares it is
/// party to (a `share` event `expired` is due at each), and what waits to be written. The stream's writer sleeps on `wakes`
/// (a buffer of one signal) and takes everything pending at once, so an idle stream holds this object,
/// one suspended task and its connection, nothing more.
final class Subscription: Sendable {
    /// One event to write: its id in the hub's numbering and what it says.
    struct Outgoing: Sendable, Equatable {
        enum Kind: Sendable, Equatable {
            case notice(EventNotice)
            case ready
            case resync(String)
        }
        var id: UInt64
        var kind: Kind
    }

    /// What the writer does on one wake-up.
    struct Step: Sendable {
        var events: [Outgoing] = []
        var heartbeat = false
        var checkSession = false
        var refreshWatch = false
    }

    /// An active share the account is party to, with an end date.
    struct ShareEnd: Sendable, Equatable {
        var patient: UUID
        var doctor: UUID
        var end: UnixMillis
    }

    private struct State {
        var watch: [UUID: UnixMillis]
        var ends: [UUID: ShareEnd] = [:]
        var step = Step()
        var started = false
        var nextBeat: ContinuousClock.Instant
    }

    let account: UUID
    let tokenHash: String
    let openedAt = ContinuousClock.now
    /// The service's clock, against which a watched tresor's end date is read.
    let now: @Sendable () -> UnixMillis
    let wakes: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation
    private let state: NIOLockedValueBox<State>

    init(
        account: UUID,
        tokenHash: String,
        watch: [UUID: UnixMillis],
        ends: [UUID: ShareEnd] = [:],
        now: @escaping @Sendable () -> UnixMillis,
        firstBeat: ContinuousClock.Instant
    ) {
        self.account = account
        self.tokenHash = tokenHash
        self.now = now
        (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        state = NIOLockedValueBox(State(watch: watch, ends: ends, nextBeat: firstBeat))
    }

    /// Whether `notice` concerns this stream now: its own records, a tresor shared with it whose share has
    /// not reached its end date, a share it is party to, a resync for everyone.
    func wants(_ notice: EventNotice) -> Bool {
        switch notice {
        case let .change(owner, _, tresors):
            guard owner != account else { return true }
            let now = now()
            return state.withLockedValue { s in tresors.contains { (s.watch[$0] ?? .min) > now } }
        case let .share(_, patient, doctor, _, approved): return patient == account || (approved && doctor == account)
        case let .account(a): return a == account
        case .resync: return true
        }
    }

    /// Queues an event; past `limit` waiting events they are all replaced by one `resync` (the stream
    /// fell behind), which covers the dropped ones.
    func enqueue(_ event: Outgoing, limit: Int) {
        state.withLockedValue { s in
            if case .notice(.share) = event.kind { s.step.refreshWatch = true }
            if s.step.events.count >= limit {
                s.step.events = [Outgoing(id: event.id, kind: .resync("overflow"))]
            } else {
                s.step.events.append(event)
            }
        }
        wake.yield()
    }

    /// The account's standing changed: the writer checks the session now.
    func checkSession() {
        state.withLockedValue { $0.step.checkSession = true }
        wake.yield()
    }

    /// A heartbeat (and a session check) if one is due at `now`; a wake-up if a share it is party to reached
    /// its end date by the service's clock (the writer takes the ended shares itself, `takeEnded`).
    func beatIfDue(_ now: ContinuousClock.Instant, every interval: Duration) {
        let wall = self.now()
        let due = state.withLockedValue { s in
            var due = false
            if s.nextBeat <= now {
                s.nextBeat = now + interval
                s.step.heartbeat = true
                due = true
            }
            return due || s.ends.values.contains { $0.end <= wall }
        }
        if due { wake.yield() }
    }

    /// Everything pending, leaving nothing.
    func take() -> Step {
        state.withLockedValue { s in
            defer { s.step = Step() }
            return s.step
        }
    }

    /// The tresors shared with the account, each with the end date of its share (`.max` for none), and the
    /// active shares it is party to that have an end date.
    func setWatch(_ watch: [UUID: UnixMillis], ends: [UUID: ShareEnd]) {
        state.withLockedValue { s in
            s.watch = watch
            s.ends = ends
        }
    }

    /// The shares whose end date is at or before `now`, forgotten here (each is announced once).
    func takeEnded(at now: UnixMillis) -> [(share: UUID, ShareEnd)] {
        state.withLockedValue { s in
            let ended = s.ends.filter { $0.value.end <= now }
            for id in ended.keys { s.ends[id] = nil }
            return ended.map { ($0.key, $0.value) }.sorted { $0.share.uuidString < $1.share.uuidString }
        }
    }

    /// The writer runs; a subscription that never starts (its response was never written) is dropped.
    func markStarted() { state.withLockedValue { $0.started = true } }
    var started: Bool { state.withLockedValue { $0.started } }

    /// Ends the writer's loop.
    func close() { wake.finish() }
}
