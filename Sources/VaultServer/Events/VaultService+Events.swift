import Foundation
import Hummingbird
import NIOCore
import ServiceLifecycle
import VaultAPI
import VaultCore

/// Live events (Docs/events.md): what the service publishes after a committed change, and the stream of
/// one subscriber.
extension VaultService {
    /// After a push: a `change` for the owner's newest stored sequence and the tresors written to.
    func announcePush(owner: UUID, _ results: [PushResult], _ envelopes: [PushedEnvelope]) {
        let stored = zip(results, envelopes).filter { $0.0.status == .stored }
        let tresors = Set(stored.compactMap { $0.1.envelope.header.tresorID })
        for notice in EventNotice.changes(owner: owner, sequence: stored.compactMap(\.0.sequence).max(), tresors: tresors) {
            events.publish(notice)
        }
    }

    /// After a share changed state or grant: a `share` for both parties; returns `row` for the answer.
    func announce(_ row: ShareRow) -> ShareRow {
        events.publish(.share(id: row.id, patient: row.patientID, doctor: row.doctorID, state: row.state, approved: row.approval != nil))
        return row
    }

    /// After an account was suspended or deleted, or sessions of it ended: its streams check their session.
    func announceAccount(_ id: UUID) { events.publish(.account(id)) }

    /// What `caller`'s stream follows at `now`: the tresors shared with a doctor in active, unexpired shares,
    /// each with its share's end date (`.max` for none; the stream stops hearing of a tresor at that date; a
    /// patient hears of their own records by owner), and the active, unexpired shares with an end date the
    /// caller is party to (a `share` event `expired` is due at each).
    func streamWatch(_ caller: Caller, at now: UnixMillis) async throws -> (watch: [UUID: UnixMillis], ends: [UUID: Subscription.ShareEnd]) {
        let shares: [ShareRow]
        switch caller.user.role {
        case .doctor: shares = try await repository.shares(doctorID: caller.id)
        case .patient: shares = try await repository.shares(patientID: caller.id)
        }
        let active = shares.filter { $0.state == .active && ($0.expiresAt ?? .max) > now }
        let watch = caller.user.role == .doctor ? Dictionary(active.map { ($0.tresorID, $0.expiresAt ?? .max) }, uniquingKeysWith: max) : [:]
        let ends = Dictionary(
            active.compactMap { row in row.expiresAt.map { (row.id, Subscription.ShareEnd(patient: row.patientID, doctor: row.doctorID, end: $0)) } },
            uniquingKeysWith: { a, _ in a }
        )
        return (watch, ends)
    }

    /// Why `caller`'s stream must end (the `account` reason), or nil while its session still passes every
    /// check of `SessionAuthenticator`.
    func streamStanding(_ caller: Caller) async throws -> (reason: String?, expiresAt: UnixMillis) {
        guard let check = try await lifecycle.sessionCheck(tokenHash: caller.tokenHash), check.session.expiresAt > clock(),
            check.sessionGeneration == check.accountGeneration
        else { return (try await endedReason(caller), 0) }
        guard check.suspendedAt == nil else { return ("suspended", check.session.expiresAt) }
        guard let user = try await repository.user(id: caller.id), user.status == .active else { return ("inactive", check.session.expiresAt) }
        return (nil, check.session.expiresAt)
    }

    /// Why a session stopped passing: a suspension and a deleted account end every session, so they are
    /// named before the session itself.
    private func endedReason(_ caller: Caller) async throws -> String {
        guard let user = try await repository.user(id: caller.id), user.status == .active else { return "inactive" }
        return try await lifecycle.accountState(userID: caller.id).suspendedAt != nil ? "suspended" : "session-ended"
    }

    /// Opens `caller`'s stream (400 for an over-long `Last-Event-ID`, 429/503 past the caps).
    func openEventStream(_ caller: Caller, lastEventID: String?) async throws -> EventStreamWriter {
        if let lastEventID, lastEventID.utf8.count > LiveEvent.maxIDBytes {
            throw APIError.badRequest("Last-Event-ID is longer than \(LiveEvent.maxIDBytes) bytes")
        }
        let (reason, expiresAt) = try await streamStanding(caller)
        // The session passed the authenticator a moment ago; one that stopped since is answered like it.
        if reason == "session-ended" { throw APIError(.unauthorized, .unauthorized, "session expired or logged out; log in again") }
        if reason != nil { throw APIError(.forbidden, .forbidden, "account is suspended or not active") }
        let (watch, ends) = try await streamWatch(caller, at: clock())
        let sub = try events.subscribe(
            account: caller.id,
            tokenHash: caller.tokenHash,
            watch: watch,
            ends: ends,
            now: clock,
            lastEventID: lastEventID
        )
        return EventStreamWriter(service: self, caller: caller, subscription: sub, expiresAt: expiresAt)
    }
}

/// Writes one subscriber's stream until it must end: the session fails a check (an `account` event, then
/// the end), the stream reached its lifetime, the server shuts down, a check could not reach the
/// database, or a write fails (the client left).
struct EventStreamWriter: Sendable {
    let service: VaultService
    let caller: Caller
    let subscription: Subscription
    let expiresAt: UnixMillis

    func run(_ write: (ByteBuffer) async throws -> Void) async throws {
        let hub = service.events
        defer { hub.unsubscribe(subscription) }
        subscription.markStarted()
        // The server waits for open requests when it stops: a stream must end then, or it would hold the
        // stop up for as long as its client stays.
        try await withGracefulShutdownHandler {
            try await loop(write)
        } onGracefulShutdown: { [subscription] in
            subscription.close()
        }
    }

    private func loop(_ write: (ByteBuffer) async throws -> Void) async throws {
        let hub = service.events
        var expiresAt = expiresAt
        for await _ in subscription.wakes {
            let step = subscription.take()
            var reason: String?
            // Shares that reached their end date are announced before the shares are read again, at the same
            // instant, so that none passes between the two unannounced.
            let now = service.clock()
            do {
                // Announced only if the share is still active in the database: one revoked or deleted just
                // before its end date (its event may still be on its way) did not expire.
                for (share, end) in subscription.takeEnded(at: now) {
                    guard let row = try await service.repository.share(id: share), row.state == .active, (row.expiresAt ?? .max) <= now else {
                        continue
                    }
                    hub.announceEnded(share, end)
                }
                if step.checkSession || step.heartbeat, service.clock() < expiresAt {
                    (reason, expiresAt) = try await service.streamStanding(caller)
                }
                if reason == nil, step.refreshWatch || step.checkSession || step.heartbeat {
                    let (watch, ends) = try await service.streamWatch(caller, at: now)
                    subscription.setWatch(watch, ends: ends)
                }
            } catch {
                // A check the database did not answer keeps no session standing and no share watched: the
                // stream ends without `account`, and the client reconnects through the authenticator.
                return
            }
            if reason == nil, service.clock() >= expiresAt { reason = "session-ended" }
            if let reason {
                try await write(ByteBuffer(string: Self.event(nil, .account, ReasonEventData(reason: reason))))
                return
            }
            // A change queued under an older watch set is written only if it still concerns the stream: a
            // share revoked, or past its end date, since then takes its tresor's changes with it.
            let events = step.events.filter { event in
                guard case let .notice(notice) = event.kind, case .change = notice else { return true }
                return subscription.wants(notice)
            }
            var text = events.map { Self.render($0, hub, to: caller.id) }.joined()
            if text.isEmpty, step.heartbeat { text = ": hb\n\n" }
            if !text.isEmpty { try await write(ByteBuffer(string: text)) }
            if ContinuousClock.now - subscription.openedAt >= hub.limits.lifetime { return }
        }
    }

    static func render(_ event: Subscription.Outgoing, _ hub: EventHub, to subscriber: UUID) -> String {
        let id = hub.eventID(event.id)
        switch event.kind {
        case .ready: return Self.event(id, .ready, [String: String]())
        case let .resync(reason): return Self.event(id, .resync, ReasonEventData(reason: reason))
        case let .notice(.change(owner, sequence, _)):
            // The owner's overall change counter is the owner's own: a doctor hears only that something it
            // holds changed, with sequence 0, which every client reads and none takes as a cursor (Docs/events.md §3).
            return Self.event(id, .change, ChangeEventData(owner: owner, sequence: owner == subscriber ? sequence : 0))
        case let .notice(.share(share, patient, _, state, _)):
            // The patient is named once the share was approved (active, or expired after being active): a
            // doctor learns nothing of a patient whose request the admin has not approved (Docs/events.md §3).
            let named = state == .active || state == .expired ? patient : nil
            return Self.event(id, .share, ShareEventData(share: share, state: state.rawValue, patient: named))
        case .notice(.account), .notice(.resync): return ""
        }
    }

    /// One event as Docs/events.md §2 frames it; `account` carries no id (the stream ends after it).
    static func event(_ id: String?, _ name: LiveEvent.Name, _ data: some Encodable) -> String {
        let json = (try? encoder.encode(data)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        return (id.map { "id: \($0)\n" } ?? "") + "event: \(name.rawValue)\ndata: \(json)\n\n"
    }

    private static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()
}
