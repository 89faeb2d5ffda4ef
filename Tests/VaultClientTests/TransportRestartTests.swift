import Foundation
import NIOConcurrencyHelpers
import Testing
import VaultAPI
import VaultClient

/// A server that answered and then refuses connections is restarting (a deploy, a crash and its
/// supervisor): the transport waits for it within the request's budget, a POST too, since a refused
/// connection carried nothing. A server that never answered is still reported at once
/// (`TransportTests.noListenerIsUnreachableInPlainWords`).
@Suite("Transport rides through a server restart", .serialized, OnOwnThread())
struct TransportRestartTests {
    static let listing = #"{"changes":[],"nextCursor":0,"done":true}"#
    typealias Page = TransportTests.ListingPage

    @Test func aRequestWaitsForTheServerItReachedBeforeToComeBack() async throws {
        let first = try FakeServer.answering("200 OK", contentType: "application/json", Self.listing)
        let port = first.port
        let transport = try Transport(baseURL: "http://127.0.0.1:\(port)", maxAttempts: 2, baseDelayMs: 100, timeout: .seconds(20))
        _ = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage))
        first.stop()
        try await Task.sleep(for: .milliseconds(300))

        // Back 1.5 s later on the same port, while the POST below is being tried.
        let again = NIOLockedValueBox<FakeServer?>(nil)
        let posts = NIOLockedValueBox(0)
        // On a thread of its own: the restart's timing must not wait for the test process's task pool.
        // blocking: waited for by a suite that runs on its own thread (OnOwnThread)
        let restarted = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            // blocking: on a thread of its own
            Thread.sleep(forTimeInterval: 1.5)
            again.withLockedValue { $0 = try? Self.answeringPosts(port: port, count: posts) }
            restarted.signal()
        }
        defer { again.withLockedValue { $0?.stop() } }
        let started = ContinuousClock.now
        let page = try await transport.send(Endpoint<[String: String], Page>(.POST, Routes.login), ["username": "someone"])
        restarted.wait()
        #expect(page.done)
        #expect(ContinuousClock.now - started >= .milliseconds(1_400), "it waited for the restart")
        _ = try #require(again.withLockedValue { $0 }, "the fake server could not listen on its old port")
        #expect(posts.withLockedValue { $0 } == 1, "the POST reached the restarted server exactly once")
    }

    /// A server that reads a request with its body (up to the end of its head and `Content-Length` bytes),
    /// counts it and answers the listing.
    static func answeringPosts(port: UInt16, count: NIOLockedValueBox<Int>) throws -> FakeServer {
        try FakeServer(port: port) { server, fd in
            var data: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                if let end = String(decoding: data, as: UTF8.self).range(of: "\r\n\r\n") {
                    let text = String(decoding: data, as: UTF8.self)
                    let head = text[..<end.lowerBound].lowercased()
                    let length =
                        head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                        .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                    if text.utf8.count - text.utf8.distance(from: text.startIndex, to: end.upperBound) >= length { break }
                }
                let n = recv(fd, &buffer, buffer.count, 0)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { return }
                data += buffer[0..<n]
            }
            count.withLockedValue { $0 += 1 }
            let body = Self.listing
            server.write(
                fd,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            )
        }
    }

    @Test func aServerThatStaysGoneIsReportedWithinTheBudget() async throws {
        let first = try FakeServer.answering("200 OK", contentType: "application/json", Self.listing)
        let transport = try Transport(baseURL: "http://127.0.0.1:\(first.port)", maxAttempts: 2, baseDelayMs: 10, timeout: .seconds(20))
        _ = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage))
        first.stop()
        try await Task.sleep(for: .milliseconds(300))
        let started = ContinuousClock.now
        let error = await #expect(throws: ClientError.self) { _ = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage)) }
        guard case .serverUnreachable? = error else {
            Issue.record("expected unreachable, got \(String(describing: error))")
            return
        }
        // Eight tries with a backoff from 10 ms: gone for good is said in seconds, not at the 20 s budget.
        #expect(ContinuousClock.now - started < .seconds(10))
        TransportTests.expectPlain(error)
    }

    @Test func withTheToolsDelaysARestartIsWaitedForAboutTenSeconds() async throws {
        let first = try FakeServer.answering("200 OK", contentType: "application/json", Self.listing)
        let transport = try Transport(baseURL: "http://127.0.0.1:\(first.port)", timeout: .seconds(30))
        _ = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage))
        first.stop()
        try await Task.sleep(for: .milliseconds(300))
        let started = ContinuousClock.now
        await #expect(throws: ClientError.self) { _ = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage)) }
        // Seven waits of half to all of 400, 800, 1,600 and then 2,000 ms: 5.4 to 10.8 s.
        let waited = ContinuousClock.now - started
        #expect(waited >= .seconds(5) && waited < .seconds(14), "waited \(waited)")
    }

    @Test func oneTryMeansOneTryEvenAfterAnAnswer() async throws {
        let first = try FakeServer.answering("200 OK", contentType: "application/json", Self.listing)
        let transport = try Transport(baseURL: "http://127.0.0.1:\(first.port)", maxAttempts: 1, baseDelayMs: 100, timeout: .seconds(20))
        _ = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage))
        first.stop()
        try await Task.sleep(for: .milliseconds(300))
        let started = ContinuousClock.now
        await #expect(throws: ClientError.self) { _ = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage)) }
        #expect(ContinuousClock.now - started < .seconds(1))
    }

    @Test func aRetryAfterIsWaitedForBeforeTheNextTry() async throws {
        let calls = NIOLockedValueBox(0)
        let server = try FakeServer { server, fd in
            server.readRequest(fd)
            let first = calls.withLockedValue { c in
                c += 1
                return c == 1
            }
            let body = first ? #"{"error":{"code":"unavailable","message":"storage is unavailable, retry later"}}"# : Self.listing
            let status = first ? "503 Service Unavailable\r\nRetry-After: 1" : "200 OK"
            server.write(
                fd,
                "HTTP/1.1 \(status)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            )
        }
        defer { server.stop() }
        let transport = try Transport(baseURL: "http://127.0.0.1:\(server.port)", maxAttempts: 2, baseDelayMs: 10, timeout: .seconds(20))
        let started = ContinuousClock.now
        let page = try await transport.send(Endpoint<NoBody, Page>(.GET, TransportTests.pullPage))
        #expect(page.done)
        #expect(calls.withLockedValue { $0 } == 2)
        #expect(ContinuousClock.now - started >= .milliseconds(950), "the second try came after the second the server asked for")
    }
}
