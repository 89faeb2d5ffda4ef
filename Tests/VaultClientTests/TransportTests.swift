import Foundation
import Testing
import VaultAPI
import VaultClient

#if canImport(Glibc)
import Glibc
#endif

/// A loopback listener on a free port that plays a broken server: every connection is handed to
/// `reply`, which reads the request and writes whatever bytes the test wants (or nothing at all).
final class FakeServer: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let lock = NSLock()
    private var stopped = false
    private var open: Set<Int32> = []
    private var requestCount = 0
    private var sentCount = 0

    /// How many requests arrived, and how many body bytes `reply` managed to send.
    var requests: Int { lock.withLock { requestCount } }
    var bytesSent: Int { lock.withLock { sentCount } }
    var isStopped: Bool { lock.withLock { stopped } }

    /// Listens on `port` (0: a free one the kernel picks; another: a server started again where one was).
    init(port wanted: UInt16 = 0, _ reply: @escaping @Sendable (FakeServer, Int32) -> Void) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = wanted.bigEndian
        addr.sin_addr = in_addr(s_addr: inet_addr("127.0.0.1"))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard fd >= 0, bound, listen(fd, 16) == 0 else { throw POSIXError(.EADDRNOTAVAIL) }
        listener = fd
        port = UInt16(bigEndian: addr.sin_port)
        Thread.detachNewThread { self.acceptLoop(reply) }
    }

    private func acceptLoop(_ reply: @escaping @Sendable (FakeServer, Int32) -> Void) {
        defer { close(listener) }
        while !isStopped {
            var p = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 50) > 0 else { continue }
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { continue }
            lock.withLock { _ = open.insert(fd) }
            Thread.detachNewThread {
                reply(self, fd)
                self.lock.withLock { _ = self.open.remove(fd) }
                close(fd)
            }
        }
    }

    /// Stops accepting and breaks every open connection (a blocked handler wakes up and ends).
    func stop() {
        lock.withLock {
            stopped = true
            for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    /// Reads up to the end of the request head (the tests send no bodies) and counts the request.
    func readRequest(_ fd: Int32) {
        var head: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !head.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            let n = recv(fd, &buffer, buffer.count, 0)
            // Child processes of other tests deliver SIGCHLD, which may interrupt a blocked call.
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return }
            head += buffer[0..<n]
        }
        lock.withLock { requestCount += 1 }
    }

    /// Sends everything or reports that the client went away.
    @discardableResult
    func write(_ fd: Int32, _ bytes: [UInt8], counted: Bool = false) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return false }
            offset += n
            if counted { lock.withLock { sentCount += n } }
        }
        return true
    }

    func write(_ fd: Int32, _ text: String) { write(fd, Array(text.utf8)) }

    /// Holds a connection open without answering until the test stops the server.
    func stayQuiet(_ fd: Int32) {
        // blocking: on the fake server's own thread
        while !isStopped { Thread.sleep(forTimeInterval: 0.02) }
    }

    /// A server answering every request with `status`, `contentType` and `body`.
    static func answering(_ status: String, contentType: String, _ body: String, port: UInt16 = 0) throws -> FakeServer {
        try FakeServer(port: port) { server, fd in
            server.readRequest(fd)
            // "Connection: close": the client must not send its retry on this connection, which closes now (the
            // retry would race the close and read as a cut-off answer).
            server.write(
                fd,
                "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            )
        }
    }
}

/// Runs each test's tasks on a thread of their own. Other suites running in parallel keep the shared
/// cooperative threads busy with key derivation and sealing for seconds, and these tests measure time.
struct OnOwnThread: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(DedicatedExecutor.shared, operation: function)
    }
}

/// A task executor with one thread that runs nothing else.
final class DedicatedExecutor: TaskExecutor, @unchecked Sendable {
    static let shared = DedicatedExecutor()
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    private init() { Thread.detachNewThread { self.run() } }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.withLock {
            jobs.append(job)
            condition.signal()
        }
    }

    private func run() {
        while true {
            let job = condition.withLock {
                while jobs.isEmpty { condition.wait() }
                return jobs.removeFirst()
            }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

@Suite("Transport against a server that answers garbage, hangs or vanishes", .serialized, OnOwnThread())
struct TransportTests {
    static let pullPage = Routes.records + "?since=0&limit=1000"

    /// A JSON listing as the page routes answer one (`changes`, `nextCursor`, `done`), to check decoding.
    struct ListingPage: Decodable {
        struct Item: Decodable { var sequence: UInt64 }
        var changes: [Item]
        var nextCursor: UInt64
        var done: Bool
    }

    static func transport(_ server: FakeServer, attempts: Int = 2, timeout: Duration = .seconds(10)) throws -> Transport {
        try Transport(baseURL: "http://127.0.0.1:\(server.port)", maxAttempts: attempts, baseDelayMs: 10, timeout: timeout)
    }

    /// The tools print these messages: no Swift type, case or module names may leak into them.
    static func expectPlain(_ error: ClientError?, sourceLocation: SourceLocation = #_sourceLocation) {
        let text = error.map { "\($0)" } ?? ""
        for word in ["Error(", "Error.", "NIO", "HTTPClient", "Decoding", "CodingKeys", "Response", "Optional(", "Swift."] {
            #expect(!text.contains(word), "'\(word)' in: \(text)", sourceLocation: sourceLocation)
        }
    }

    @Test func htmlInsteadOfJSONIsUnreadableAndNotRetried() async throws {
        let server = try FakeServer.answering("200 OK", contentType: "text/html", "<html><body>Please log in to the Wi-Fi</body></html>")
        defer { server.stop() }
        let error = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(server).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        }
        #expect(error?.isUnreadableAnswer == true)
        guard case let .integrity(message)? = error else { return }
        #expect(message == "the server sent an answer this tool cannot read (expected JSON from GET /v1/records; got 'text/html')")
        #expect(server.requests == 1, "the same server would give the same answer: no retry")
        Self.expectPlain(error)
    }

    @Test func jsonOfTheWrongShapeOrLabelIsUnreadable() async throws {
        let wrongShape = try FakeServer.answering("200 OK", contentType: "application/json; charset=utf-8", #"{"changes": [], "done": true}"#)
        defer { wrongShape.stop() }
        let missing = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(wrongShape).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        }
        #expect(missing?.isUnreadableAnswer == true)
        #expect("\(missing!)".contains("the field 'nextCursor' is missing"), "\(missing!)")
        Self.expectPlain(missing)

        let wrongType = try FakeServer.answering("200 OK", contentType: "application/json", #"{"changes": [7], "done": true, "nextCursor": 1}"#)
        defer { wrongType.stop() }
        let mismatch = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(wrongType).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        }
        #expect("\(mismatch!)".contains("the field 'changes.0' has the wrong kind of value"), "\(mismatch!)")
        Self.expectPlain(mismatch)

        // A valid page with the wrong label is refused as well: the API promises application/json.
        let mislabelled = try FakeServer.answering("200 OK", contentType: "text/plain", #"{"changes": [], "done": true, "nextCursor": 0}"#)
        defer { mislabelled.stop() }
        let label = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(mislabelled).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        }
        #expect(label?.isUnreadableAnswer == true)
    }

    @Test func aValidPageAboveTheObjectLimitIsAccepted() async throws {
        // 3 MiB of padding inside a valid page: over the 1 MiB limit of single answers, within the page limit.
        let body = #"{"changes": [], "done": true, "nextCursor": 42, "padding": ""# + String(repeating: "x", count: 3 << 20) + #""}"#
        let server = try FakeServer.answering("200 OK", contentType: "application/json", body)
        defer { server.stop() }
        let page = try await Self.transport(server).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        #expect(page.nextCursor == 42 && page.done)
        let error = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(server).send(Endpoint<NoBody, ListingPage>(.GET, Routes.me))
        }
        #expect("\(error!)".contains("more than 1 MiB from GET /v1/accounts/me"), "\(error!)")
    }

    @Test func anEndlessBodyIsCutAtTheLimitWithoutReadingOn() async throws {
        // Chunked, with no length announced: the client only finds out by counting, and must stop reading.
        let server = try FakeServer { server, fd in
            server.readRequest(fd)
            server.write(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            let chunk = Array("10000\r\n".utf8) + [UInt8](repeating: 0x20, count: 0x10000) + Array("\r\n".utf8)
            while server.bytesSent < 512 << 20, server.write(fd, chunk, counted: true) {}
        }
        defer { server.stop() }
        let error = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(server).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        }
        #expect(error?.isUnreadableAnswer == true)
        #expect("\(error!)".contains("more than 16 MiB from GET /v1/records, the most this tool accepts there"), "\(error!)")
        #expect(server.requests == 1, "too large is not retried")
        // What the server got out is the limit plus what the two socket buffers hold, not the 512 MiB it tried.
        #expect(server.bytesSent < 64 << 20, "the client went on reading: \(server.bytesSent) bytes")
        Self.expectPlain(error)
    }

    @Test func anAnnouncedHugeBodyIsRefusedBeforeReading() async throws {
        let server = try FakeServer { server, fd in
            server.readRequest(fd)
            server.write(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 209715200\r\n\r\n{")
            server.stayQuiet(fd)
        }
        defer { server.stop() }
        let started = ContinuousClock.now
        let error = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(server).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        }
        #expect(error?.isUnreadableAnswer == true)
        // Reading on would have waited for the 10 s budget and ended as a timeout, not as this refusal.
        #expect(ContinuousClock.now - started < .seconds(5), "the announced length alone is enough to refuse")
    }

    @Test func aMalformedOrTruncatedReplyIsTemporaryNotUnreachable() async throws {
        let replies = [
            "HTTP/1.1 200 OK\r\nContent-Length: banana\r\n\r\n{}",
            "SSH-2.0-OpenSSH_9.6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"changes\": [",
        ]
        for reply in replies {
            let server = try FakeServer { server, fd in
                server.readRequest(fd)
                server.write(fd, reply)
            }
            defer { server.stop() }
            let error = await #expect(throws: ClientError.self) {
                _ = try await Self.transport(server).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
            }
            #expect(error == .temporary("the server's answer was cut off or malformed; try again"), "\(reply)")
            #expect(server.requests == 2, "a broken answer is temporary, so it is tried again")
        }
    }

    @Test func aSilentServerEndsWithinTheBudget() async throws {
        let server = try FakeServer { server, fd in
            server.readRequest(fd)
            server.stayQuiet(fd)
        }
        defer { server.stop() }
        let started = ContinuousClock.now
        let error = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(server, attempts: 4, timeout: .seconds(2)).send(Endpoint<NoBody, ListingPage>(.GET, Self.pullPage))
        }
        let elapsed = ContinuousClock.now - started
        // The second try's own read timeout (1 s, from about 1 s on) and the budget (2 s) end together: on a
        // loaded machine either may come first. A temporary failure at the budget either way, never a later one.
        #expect(
            error == .temporary("the server did not answer within 2 s") || error == .temporary("the server stopped answering for 1 s"),
            "\(String(describing: error))"
        )
        #expect(elapsed >= .milliseconds(1_900) && elapsed < .seconds(3), "\(elapsed)")
        #expect(server.requests == 2, "one retry after the per-try read timeout (half the budget), then the budget ends")
    }

    @Test func retriesNeverOutlastTheBudget() async throws {
        let server = try FakeServer.answering(
            "503 Service Unavailable",
            contentType: "application/json",
            #"{"error": {"code": "unavailable", "message": "busy"}}"#
        )
        defer { server.stop() }
        let transport = try Transport(baseURL: "http://127.0.0.1:\(server.port)", maxAttempts: 50, baseDelayMs: 400, timeout: .seconds(2))
        let started = ContinuousClock.now
        let error = await #expect(throws: ClientError.self) { _ = try await transport.send(Endpoint<NoBody, ListingPage>(.GET, Routes.me)) }
        // The server's own words, or (when a loaded machine slows the last try past the budget) the budget's:
        // a temporary failure either way, never a later one.
        #expect(error == .temporary("busy") || error == .temporary("the server did not answer within 2 s"), "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(3))
        #expect(server.requests >= 2 && server.requests < 50, "\(server.requests) tries")
    }

    @Test func aServerErrorIsTemporaryWithItsMessageMadePrintable() async throws {
        let server = try FakeServer.answering(
            "500 Internal Server Error",
            contentType: "application/json",
            #"{"error": {"code": "internal", "message": "the database is on fire\u001b[2J\u001b]0;pwned\u0007"}}"#
        )
        defer { server.stop() }
        let error = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(server).send(Endpoint<NoBody, ListingPage>(.GET, Routes.me))
        }
        guard case let .temporary(message)? = error else {
            Issue.record("expected a temporary failure, got \(String(describing: error))")
            return
        }
        #expect(!message.unicodeScalars.contains { $0.properties.generalCategory == .control }, "no terminal escapes: \(message)")
        // Under a loaded machine the fake server's close can overtake its answer, which then reads as cut off
        // (also temporary): seen once in a full parallel run, never alone. Kept visible, not hidden.
        withKnownIssue("the fake server's close can overtake its 500 answer under load", isIntermittent: true) {
            #expect(message.hasPrefix("the database is on fire"))
            #expect(server.requests == 2, "5xx is temporary, so it is tried again")
        }

        let bare = try FakeServer.answering("500 Internal Server Error", contentType: "text/html", "<h1>oops</h1>")
        defer { bare.stop() }
        let plain = await #expect(throws: ClientError.self) {
            _ = try await Self.transport(bare).send(Endpoint<NoBody, ListingPage>(.GET, Routes.me))
        }
        #expect(plain == .temporary("the server failed (HTTP 500)"))
    }

    @Test func aConnectionClosedAtOnceIsTemporary() async throws {
        let server = try FakeServer { _, _ in }
        defer { server.stop() }
        // Many at once, with bodies: the close then lands at every stage of a request (writing the head,
        // the body, waiting for the answer), and each stage must read as a broken answer, not a missing server.
        let errors = await withTaskGroup(of: [ClientError].self) { group in
            for _ in 0..<8 {
                group.addTask {
                    var seen: [ClientError] = []
                    for _ in 0..<25 {
                        do {
                            let body = ["padding": String(repeating: "x", count: 100_000)]
                            _ = try await Self.transport(server, attempts: 1).send(Endpoint<[String: String], ListingPage>(.POST, Routes.login), body)
                        } catch { seen.append(ClientError.from(error)) }
                    }
                    return seen
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(errors.count == 200)
        #expect(Set(errors.map(\.description)) == ["temporary failure: the server's answer was cut off or malformed; try again"])
    }

    @Test func noListenerIsUnreachableInPlainWords() async throws {
        let server = try FakeServer { _, _ in }
        let port = server.port
        server.stop()
        try await Task.sleep(for: .milliseconds(200))
        let transport = try Transport(baseURL: "http://127.0.0.1:\(port)", maxAttempts: 4, baseDelayMs: 10, timeout: .seconds(5))
        let started = ContinuousClock.now
        let error = await #expect(throws: ClientError.self) { _ = try await transport.send(Endpoint<NoBody, ListingPage>(.GET, Routes.me)) }
        guard case .serverUnreachable? = error else {
            Issue.record("expected unreachable, got \(String(describing: error))")
            return
        }
        #expect(ContinuousClock.now - started < .seconds(1), "a refused connection is not retried")
        Self.expectPlain(error)
    }

    @Test func theBudgetMustBeSane() {
        #expect(throws: ClientError.self) { try Transport(baseURL: "http://127.0.0.1:1", timeout: .zero) }
        #expect(throws: ClientError.self) { try Transport(baseURL: "http://127.0.0.1:1", timeout: .seconds(-5)) }
        #expect(throws: Never.self) { try Transport(baseURL: "http://127.0.0.1:1", timeout: .seconds(2)) }
    }
}
