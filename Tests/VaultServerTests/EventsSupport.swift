import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

/// One event as a test reads it off a stream.
struct ReadEvent: Sendable, Equatable {
    var id: String?
    var name: String
    var data: String
}

/// One subscriber's stream, written by the real `EventStreamWriter` into memory instead of a socket.
final class StreamTap: Sendable {
    private let text = NIOLockedValueBox("")
    private let ended = NIOLockedValueBox(false)
    private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)

    init(_ writer: EventStreamWriter) {
        let t = Task { [text, ended] in
            try? await writer.run { buffer in text.withLockedValue { $0 += String(buffer: buffer) } }
            ended.withLockedValue { $0 = true }
        }
        task.withLockedValue { $0 = t }
    }

    var raw: String { text.withLockedValue { $0 } }
    var hasEnded: Bool { ended.withLockedValue { $0 } }

    /// The events written so far (heartbeats left out).
    var events: [ReadEvent] {
        raw.components(separatedBy: "\n\n").compactMap { block in
            var e = ReadEvent(id: nil, name: "", data: "")
            for line in block.split(separator: "\n") {
                if line.hasPrefix("id: ") { e.id = String(line.dropFirst(4)) }
                if line.hasPrefix("event: ") { e.name = String(line.dropFirst(7)) }
                if line.hasPrefix("data: ") { e.data = String(line.dropFirst(6)) }
            }
            return e.name.isEmpty ? nil : e
        }
    }

    func named(_ name: String) -> [ReadEvent] { events.filter { $0.name == name } }

    /// Waits (up to `seconds`) until `condition` holds.
    func wait(_ what: String, seconds: Double = 30, until condition: @Sendable (StreamTap) -> Bool) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1_000))
        while !condition(self) {
            guard ContinuousClock.now < deadline else {
                Issue.record("timed out waiting for \(what); the stream so far:\n\(raw)")
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func close() async {
        let t = task.withLockedValue { $0 }
        t?.cancel()
        await t?.value
    }
}

/// The API over a fresh database with a hub the test holds, and a service beside the router that opens
/// streams on that hub as the controller does.
struct EventsWorld: Sendable {
    let api: APIClient
    let hub: EventHub
    let service: VaultService

    static func run(
        _ backend: Backend,
        limits: EventHub.Limits = EventHub.Limits(),
        _ body: @escaping @Sendable (EventsWorld) async throws -> Void
    ) async throws {
        try await TestDatabase.with(backend) { repo in
            let h = APIHarness(repository: repo)
            let hub = EventHub(limits: limits)
            let app = Application(router: buildRouter(repository: repo, adminKey: h.admin.publicKey, clock: h.clock.function, events: hub))
            let service = VaultService(repository: repo, adminKey: h.admin.publicKey, clock: h.clock.function, events: hub)
            try await app.test(.router) { client in
                try await body(EventsWorld(api: APIClient(client: client, harness: h), hub: hub, service: service))
            }
        }
    }

    /// Opens `user`'s stream as `GET /v1/events` would.
    func open(_ user: TestUser, lastEventID: String? = nil) async throws -> StreamTap {
        StreamTap(try await writer(user, lastEventID: lastEventID))
    }

    /// Opens `user`'s stream without starting its writer: what is delivered waits in one step until a
    /// `StreamTap` starts it.
    func writer(_ user: TestUser, lastEventID: String? = nil) async throws -> EventStreamWriter {
        try await service.openEventStream(try await caller(user), lastEventID: lastEventID)
    }

    /// The service's clock (the harness's, which a test moves).
    var clock: TestClock { api.harness.clock }

    func caller(_ user: TestUser) async throws -> Caller {
        let row = try #require(try await api.repository.user(id: user.id))
        return Caller(user: row, tokenHash: VaultService.tokenHash(user.token))
    }

    /// A patient with a declared tresor, and a doctor with an active share of it (keys delivered).
    func sharedPair(_ p: String, _ d: String, expiresAt: UnixMillis? = nil) async throws -> (TestUser, TestUser, Tresor) {
        let (patient, doctor, tresor, _) = try await sharedPairWithShare(p, d, expiresAt: expiresAt)
        return (patient, doctor, tresor)
    }

    /// `sharedPair`, with the share as requested (whose grant a revocation names).
    func sharedPairWithShare(_ p: String, _ d: String, expiresAt: UnixMillis? = nil) async throws -> (TestUser, TestUser, Tresor, ShareInfo) {
        let patient = try await api.user(p, role: .patient)
        let doctor = try await api.user(d, role: .doctor)
        let tresor = Tresor.create(ownerID: patient.id, category: "interventions")
        #expect(try await api.declareTresor(patient, tresor).status == .ok)
        let share = try await api.requestShare(patient, doctor, tresor, expiresAt: expiresAt)
        #expect(try await api.approveShare(share).status == .ok)
        #expect(try await api.deliverKeys(patient, doctor, share, tresor).status == .ok)
        return (patient, doctor, tresor, share)
    }

    /// Pushes one new record of `patient` in `tresor`; returns the sequence stored.
    @discardableResult
    func push(_ patient: TestUser, _ tresor: Tresor, _ record: String) async throws -> UInt64 {
        let (r, answer) = try await api.push(patient, [try api.envelope(patient, tresor, record: record, payload: "{}")])
        #expect(r.status == .ok)
        return try #require(answer?.results.first?.sequence)
    }
}

extension ReadEvent {
    /// The `change` data this event carries, if it is one.
    var change: ChangeEventData? { try? JSONDecoder().decode(ChangeEventData.self, from: Data(data.utf8)) }
    var share: ShareEventData? { try? JSONDecoder().decode(ShareEventData.self, from: Data(data.utf8)) }
    var reason: String? { (try? JSONDecoder().decode(ReasonEventData.self, from: Data(data.utf8)))?.reason }
}
