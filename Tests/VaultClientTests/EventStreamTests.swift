import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import Testing
import VaultAPI
import VaultCore
import VaultTestSupport

@testable import VaultClient

/// The event stream reader against a hostile server (crafted bytes, silence, refusals) and against the
/// real one.
@Suite("Event stream reader")
struct EventStreamTests {
    /// What the hostile server saw: the `Last-Event-ID` of each connection, in order.
    final class Seen: Sendable {
        let ids = NIOLockedValueBox<[String?]>([])
        var count: Int { ids.withLockedValue { $0.count } }
    }

    /// A server whose `GET /v1/events` answers connection `n` (from 0) with `answer(n)`. The reader gives up
    /// on a connection silent for `silence`: long by default, since a full run can stall the test process
    /// for several seconds before the first bytes are read, and that connection's content is what is tested.
    static func hostile(
        silence: Duration = .seconds(30),
        _ answer: @escaping @Sendable (Int) -> Response,
        _ body: @escaping @Sendable (EventStream, Seen) async throws -> Void
    ) async throws {
        let seen = Seen()
        let router = Router()
        router.get(RouterPath(Routes.events)) { request, _ -> Response in
            let n = seen.ids.withLockedValue { ids in
                ids.append(request.headers[HTTPField.Name("Last-Event-ID")!])
                return ids.count - 1
            }
            return answer(n)
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let transport = try Transport(baseURL: "http://127.0.0.1:\(client.port!)")
            var policy = EventStream.Policy()
            policy.baseDelay = .milliseconds(20)
            policy.maxDelay = .milliseconds(100)
            policy.silence = silence
            try await body(EventStream(transport: transport, token: "t", policy: policy), seen)
        }
    }

    static func sse(_ text: String) -> Response {
        Response(status: .ok, headers: [.contentType: "text/event-stream"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// The first `count` updates, or fewer if the stream ends or `seconds` pass. A reader that works gives
    /// them within a second or two; the allowance is long because a full run stalls this process for many
    /// seconds at its busiest (the silent-server case once missed 30 s in a fresh clone's CI, while the
    /// PostgreSQL suites were migrating), and it costs nothing unless the reader is broken.
    static func first(
        _ count: Int,
        of stream: EventStream,
        seconds: Int = 90,
        onRetry: @escaping @Sendable (ClientError) -> Void = { _ in }
    )
        async throws -> [LiveUpdate]
    {
        try await withThrowingTaskGroup(of: [LiveUpdate]?.self) { group in
            group.addTask {
                var out: [LiveUpdate] = []
                for try await u in stream.updates(onRetry: onRetry) {
                    out.append(u)
                    if out.count == count { break }
                }
                return out
            }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let updates = first else { throw ParserTestFailure("no \(count) updates in \(seconds) s") }
            return updates
        }
    }

    @Test func anOverlongLineDropsTheConnectionAndNothingInItIsBelieved() async throws {
        let owner = UUID()
        let answer: @Sendable (Int) -> Response = { n in
            n == 0
                ? Self.sse("id: a-1\nevent: change\ndata: {\"owner\":\"\(owner)\",\"sequence\":1}\(String(repeating: " ", count: 5_000))\n\n")
                : Self.sse("id: a-2\nevent: ready\ndata: {}\n\n")
        }
        try await Self.hostile(answer) { stream, seen in
            let failures = NIOLockedValueBox<[String]>([])
            let updates = try await Self.first(1, of: stream) { e in failures.withLockedValue { $0.append("\(e)") } }
            #expect(updates == [.ready(resumed: false)])
            #expect(failures.withLockedValue { $0.contains { $0.contains("limits") } })
            #expect(seen.ids.withLockedValue { $0.first } == .some(nil))
        }
    }

    @Test func garbageUnknownEventsAndBadIDsAreSkippedAndTheLastGoodIDResumes() async throws {
        let owner = UUID()
        let change = "{\"owner\":\"\(owner.uuidString)\",\"sequence\":3}"
        let answer: @Sendable (Int) -> Response = { n in
            n == 0
                ? Self.sse(
                    "\u{0}\u{7f}garbage\n\nid: good-1\nevent: exfiltrate\ndata: {}\n\nid: BAD ID\nevent: change\ndata: \(change)\n\n"
                        + "event: change\ndata: not json\n\n"
                )
                : Self.sse("event: ready\ndata: {}\n\n")
        }
        try await Self.hostile(answer) { stream, seen in
            let updates = try await Self.first(3, of: stream)
            #expect(updates == [.change(owner: owner, sequence: 3), .resync(reason: "unreadable change event"), .ready(resumed: true)])
            #expect(seen.ids.withLockedValue { Array($0.prefix(2)) } == [nil, "good-1"])
        }
    }

    @Test func aServerThatNeverSendsAnythingIsLeftAndTriedAgain() async throws {
        // The first connection stays silent until the test ends: the reader must give up on it by itself.
        let released = NIOLockedValueBox(false)
        let answer: @Sendable (Int) -> Response = { n in
            guard n == 0 else { return Self.sse("event: ready\ndata: {}\n\n") }
            return Response(
                status: .ok,
                headers: [.contentType: "text/event-stream"],
                body: ResponseBody { writer in
                    while !released.withLockedValue({ $0 }) { try? await Task.sleep(for: .milliseconds(50)) }
                    try await writer.finish(nil)
                }
            )
        }
        try await Self.hostile(silence: .seconds(1), answer) { stream, seen in
            defer { released.withLockedValue { $0 = true } }
            let updates = try await Self.first(1, of: stream)
            #expect(updates == [.ready(resumed: false)])
            #expect(seen.count >= 2)
        }
    }

    @Test func unauthorizedEndsTheReaderAndOverloadIsRetried() async throws {
        let answer: @Sendable (Int) -> Response = { n in
            switch n {
            case 0: return Response(status: .serviceUnavailable, headers: [.retryAfter: "0"])
            case 1: return Response(status: .tooManyRequests)
            default: return Response(status: .unauthorized)
            }
        }
        try await Self.hostile(answer) { stream, seen in
            await #expect(throws: ClientError.self) { _ = try await Self.first(1, of: stream) }
            #expect(seen.count == 3)
        }
    }

    @Test(arguments: Backend.allCases)
    func theRealServerWakesTheOwnerAndEndsOnLogout(_ backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let device = try world.device("phone")
            let (vault, _) = try await world.patient("pat", on: device)
            let token = try #require(vault.account.session?.token)
            let me = vault.account.identity.userID
            let stream = EventStream(transport: device.transport, token: token)
            let collected = NIOLockedValueBox<[LiveUpdate]>([])
            let reader = Task {
                for try await u in stream.updates() { collected.withLockedValue { $0.append(u) } }
            }
            try await Self.until { collected.withLockedValue { $0 } == [.ready(resumed: false)] }
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            try await Self.until { collected.withLockedValue { $0.contains { if case .change(me, _) = $0 { true } else { false } } } }
            _ = try await device.transport.send(AccountEndpoints.logout, auth: .session(token))
            try await reader.value
            #expect(collected.withLockedValue { $0.last } == .account(reason: "session-ended"))
        }
    }

    @Test func anOpenStreamDoesNotHoldUpTheServersStop() async throws {
        let stopped = NIOLockedValueBox<ContinuousClock.Instant?>(nil)
        let reader = NIOLockedValueBox<Task<Void, any Error>?>(nil)
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("phone")
            let (vault, _) = try await world.patient("pat", on: device)
            let stream = EventStream(transport: device.transport, token: try #require(vault.account.session?.token))
            let ready = NIOLockedValueBox(false)
            reader.withLockedValue { r in
                r = Task { for try await u in stream.updates() where u == .ready(resumed: false) { ready.withLockedValue { $0 = true } } }
            }
            try await Self.until { ready.withLockedValue { $0 } }
            stopped.withLockedValue { $0 = .now }
        }
        let took = ContinuousClock.now - (stopped.withLockedValue { $0 } ?? .now)
        #expect(took < .seconds(15), "the server stopped \(took) after it was asked to, with a stream open")
        reader.withLockedValue { $0 }?.cancel()
    }

    static func until(_ condition: @Sendable () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw ParserTestFailure("condition not met in 30 s") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
