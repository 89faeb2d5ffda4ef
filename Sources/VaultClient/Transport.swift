import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTLS

/// HTTP/JSON transport to a CareVault server. One place maps statuses, broken replies and unreadable
/// answers to `ClientError`; only temporary failures are retried (exponential backoff with full jitter),
/// and a server that answered before and now refuses connections (restarting), never past the request's
/// time budget.
public final class Transport: Sendable {
    /// The server's base URL.
    public let baseURL: String
    /// The time one request may take, retries and the waits between them included.
    public let timeout: Duration
    /// The budget when none is given: long enough for a large pull page on a slow link, short enough
    /// that a silent server does not hold a tool for minutes.
    public static let defaultTimeout: Duration = .seconds(30)
    /// The private CA trusted for https instead of the system's roots, when one is given.
    let trust: PrivateCA?
    let maxAttempts: Int
    let baseDelayMs: UInt64
    /// Whether this transport has had an answer from its server: from then on a refused connection is the
    /// server restarting (a deploy, a crash and its supervisor), ridden through (`sendRaw`); before, it is
    /// a wrong URL or a server not started, said at once.
    private let answered = NIOLockedValueBox(false)
    /// The most tries of a request that finds the server gone after it answered before: with the backoff
    /// below, about 10 s of a server restarting, within the request's budget.
    static let restartAttempts = 8
    static let decoder = JSONDecoder()
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// A transport to `baseURL` (e.g. `http://127.0.0.1:8080`) whose requests each end within `timeout`.
    /// With `caCertificate` (a PEM file of one or more CA certificates), https trusts those CAs only, instead
    /// of the system's roots: a deployment with a private CA pins it (Docs/operations.md).
    public init(
        baseURL: String,
        maxAttempts: Int = 4,
        baseDelayMs: UInt64 = 200,
        timeout: Duration = Transport.defaultTimeout,
        caCertificate: String? = nil
    ) throws {
        guard let url = URL(string: baseURL), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
            throw ClientError.invalidRequest("server URL must look like http://host:port, got '\(baseURL)'")
        }
        // The login key and session tokens must not cross a network in clear: plain http is for loopback only.
        let loopback = ["127.0.0.1", "localhost", "::1", "[::1]"].contains(url.host ?? "")
        if scheme == "http", !loopback, ProcessInfo.processInfo.environment["CAREVAULT_ALLOW_INSECURE_HTTP"] != "1" {
            throw ClientError.invalidRequest(
                "refusing plain http to \(url.host ?? "?"): use https (or set CAREVAULT_ALLOW_INSECURE_HTTP=1 on a trusted network)"
            )
        }
        guard timeout >= .milliseconds(100), timeout <= .seconds(86_400) else {
            throw ClientError.invalidRequest("the timeout must be between 0.1 and 86400 seconds")
        }
        self.trust = try caCertificate.map(PrivateCA.init(path:))
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelayMs = baseDelayMs
        self.timeout = timeout
    }

    /// Per try: a connection must be up within 5 s (or the budget, if smaller), and a server silent for
    /// half the budget is given up on, so one more try on a fresh connection still fits in the budget.
    var connectTimeout: Duration { min(.seconds(5), timeout) }
    var readTimeout: Duration { maxAttempts > 1 ? timeout / 2 : timeout }

    /// Authentication for one request.
    public enum Auth: Sendable {
        case none
        case session(String)
        /// Signed by the admin key for the deployment with this id (Docs/envelope-v1.md §3.5).
        case admin(SigningKeyPair, deploymentID: String)
    }

    /// One answer as it came off the wire, body already bounded by the route's limit.
    struct Answer: Sendable {
        var status: Int
        var contentType: String?
        var retryAfter: String?
        var body: [UInt8]
    }

    /// A 2xx answer is only trusted to be the promised type when it says it is JSON and decodes as one.
    static func decode<Response: Decodable>(_ answer: Answer, _ method: HTTPMethod, _ path: String) throws -> Response {
        try requireJSON(answer, method, path)
        let expected = "expected JSON from \(route(method, path))"
        do {
            return try decoder.decode(Response.self, from: Data(answer.body))
        } catch {
            throw ClientError.unreadableAnswer("\(expected) in the API's format; \(ClientError.plainWords(error))")
        }
    }

    /// Refuses an answer that does not say it is JSON.
    static func requireJSON(_ answer: Answer, _ method: HTTPMethod, _ path: String) throws {
        let type = answer.contentType.map { $0.split(separator: ";").first.map(String.init) ?? $0 }
        guard let type, type.trimmingCharacters(in: .whitespaces).lowercased() == "application/json" else {
            let got = type.map { "'\(ClientError.printable($0, limit: 60))'" } ?? "no content type"
            throw ClientError.unreadableAnswer("expected JSON from \(route(method, path)); got \(got)")
        }
    }

    /// `GET /v1/records`: a route for messages, without the query (which may hold ids and cursors).
    static func route(_ method: HTTPMethod, _ path: String) -> String { "\(method.rawValue) \(withoutQuery(path))" }

    static func withoutQuery(_ path: String) -> String { path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? path }

    /// The largest answer accepted, read without buffering past it: pull pages and lists grow with the
    /// data (a page of 1,000 padded records stays far below 16 MiB), every other answer is one small object.
    public enum AnswerLimit {
        /// Pull pages and listings.
        public static let page = 16 * 1024 * 1024
        /// Every other successful answer.
        public static let object = 1024 * 1024
        /// The body of an error answer (`{"error": …}`); a larger one is ignored, its status still counts.
        public static let error = 64 * 1024
    }

    static let pageRoutes: Set<String> = [
        Routes.records, Routes.tresors, Routes.shares, Routes.doctorPatients, Routes.accessLog,
        Routes.adminPending, Routes.adminUsers, Routes.adminAudit,
    ]

    static func answerLimit(_ method: HTTPMethod, _ path: String) -> Int {
        method == .GET && pageRoutes.contains(withoutQuery(path)) ? AnswerLimit.page : AnswerLimit.object
    }

    func sendRaw(_ method: HTTPMethod, _ path: String, payload: [UInt8], auth: Auth, media: Media = .json) async throws -> Answer {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        // One key per logical request, sent with every try of it: a retry of a POST or PUT whose first try
        // went through (its answer lost on the way) gets that first answer, not a second effect
        // (Docs/design.md §6.2).
        let idempotencyKey = method == .POST || method == .PUT ? Self.newIdempotencyKey() : nil
        var attempt = 0
        while true {
            attempt += 1
            let failure: ClientError
            var restarting = false
            var atLeast = Duration.zero
            do {
                return try await once(
                    method,
                    path,
                    payload: payload,
                    auth: auth,
                    media: media,
                    idempotencyKey: idempotencyKey,
                    deadline: deadline
                )
            } catch let error as ClientError {
                guard case .temporary = error, attempt < maxAttempts else { throw error }
                failure = error
            } catch let busy as RetryAfter {
                // Waited for as asked (at most 10 s), within the budget: the tries are not spent before the
                // server said it would answer again (a database restarting behind it).
                guard attempt < maxAttempts else { throw busy.error }
                failure = busy.error
                atLeast = .seconds(busy.seconds)
            } catch is PoolWait {
                // Nothing was sent: every connection this process may open to the server was busy (a burst of
                // concurrent requests). The wait was the back-off; the request queues again, within its budget,
                // without spending a try.
                attempt -= 1
                guard clock.now < deadline else { throw ClientError.poolBusy }
                continue
            } catch let refused as NotSent {
                // Nothing was sent (the connection was refused or never made), so any request may be tried
                // again, a POST too; only once the server has answered this transport before, and not when
                // the caller asked for one try.
                guard answered.withLockedValue({ $0 }), maxAttempts > 1, attempt < Self.restartAttempts else { throw refused.error }
                failure = refused.error
                restarting = true
            }
            // Full jitter: a random delay up to base * 2^attempt, so retrying clients spread out. A server
            // restarting: between half and all of base * 2^attempt, at most 2 s, so the tries span its start
            // (about 10 s in all). A wait that would end past the budget leaves no time for a try, so the last
            // failure stands.
            let cap = min(baseDelayMs << UInt64(attempt), restarting ? 2_000 : 10_000)
            let jitter = Int64(RandomBytes.uniform(UInt32(restarting ? cap / 2 : cap)))
            let delay = max(atLeast, Duration.milliseconds((restarting ? Int64(cap / 2) : 0) + jitter))
            guard clock.now + delay < deadline else { throw failure }
            try await Task.sleep(for: delay)
        }
    }

    private func once(
        _ method: HTTPMethod,
        _ path: String,
        payload: [UInt8],
        auth: Auth,
        media: Media,
        idempotencyKey: String?,
        deadline: ContinuousClock.Instant
    ) async throws -> Answer {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        request.headers.add(name: "Accept", value: media.accept)
        request.headers.add(name: CareVaultVersion.clientHeader, value: CareVaultVersion.release)
        if let idempotencyKey { request.headers.add(name: Idempotency.header, value: idempotencyKey) }
        if !payload.isEmpty || method == .POST || method == .PUT {
            request.headers.add(name: "Content-Type", value: media.body)
            request.body = .bytes(ByteBuffer(bytes: payload))
        }
        switch auth {
        case .none: break
        case let .session(token): request.headers.add(name: "Authorization", value: "Bearer \(token)")
        case let .admin(key, deploymentID):
            // Each attempt is signed anew: the server accepts a signature once.
            let h = AdminRequestSignature.sign(
                method: method.rawValue,
                pathAndQuery: path,
                body: payload,
                timestamp: Date().unixMillis,
                deploymentID: deploymentID,
                adminKey: key
            )
            request.headers.add(name: AdminRequestSignature.timestampHeader, value: h.timestamp)
            request.headers.add(name: AdminRequestSignature.nonceHeader, value: h.nonce)
            request.headers.add(name: AdminRequestSignature.signatureHeader, value: h.signature)
        }
        let limit = Self.answerLimit(method, path)
        let answer = try await withDeadline(deadline) { [request] in
            try await self.exchange(request, limit: limit, deadline: deadline, route: Self.route(method, path))
        }
        answered.withLockedValue { $0 = true }
        guard (200..<300).contains(answer.status) else {
            let failure = Self.map(status: answer.status, body: answer.body, retryAfter: answer.retryAfter)
            // A busy or unavailable server that says when to come back (429, 503 with Retry-After in seconds).
            if case .temporary = failure, let text = answer.retryAfter, let seconds = UInt64(text.trimmingCharacters(in: .whitespaces)) {
                throw RetryAfter(error: failure, seconds: min(seconds, 10))
            }
            throw failure
        }
        return answer
    }

    /// Runs `operation`, or fails with the budget's message when `deadline` passes first. AsyncHTTPClient's
    /// own deadline stops at the response head; this one also covers a body that trickles in forever.
    func withDeadline(_ deadline: ContinuousClock.Instant, _ operation: @escaping @Sendable () async throws -> Answer) async throws -> Answer {
        try await withThrowingTaskGroup(of: Answer?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                try? await Task.sleep(until: deadline, clock: .continuous)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let answer = first else { throw timedOut }
            return answer
        }
    }

    /// `.temporary`: a silent server may answer a later command.
    var timedOut: ClientError { .temporary("the server did not answer within \(Self.seconds(timeout)) s") }

    static func seconds(_ d: Duration) -> String {
        let ms = d.components.seconds * 1_000 + d.components.attoseconds / 1_000_000_000_000_000
        return ms % 1_000 == 0 ? "\(ms / 1_000)" : String(format: "%.1f", Double(ms) / 1_000)
    }

    /// One request and its answer, with every failure in plain words: before an answer started, a failed
    /// connection; after, a broken or oversized answer.
    private func exchange(_ request: HTTPClientRequest, limit: Int, deadline: ContinuousClock.Instant, route: String) async throws -> Answer {
        let response: HTTPClientResponse
        do {
            let http = try await client(read: readTimeout)
            let left = ContinuousClock.now.duration(to: deadline)
            response = try await http.execute(request, deadline: .now() + .nanoseconds(Self.nanoseconds(left)))
        } catch {
            if let e = error as? HTTPClientError, e == .getConnectionFromPoolTimeout { throw PoolWait() }
            await forgetIdentity(after: error)
            let failure = classify(error)
            if case .serverUnreachable = failure, Self.neverSent(error) { throw NotSent(error: failure) }
            throw failure
        }
        let status = Int(response.status.code)
        var answer = Answer(
            status: status,
            contentType: response.headers.first(name: "Content-Type"),
            retryAfter: response.headers.first(name: "Retry-After"),
            body: []
        )
        let success = (200..<300).contains(status)
        do {
            answer.body = Array(try await response.body.collect(upTo: success ? limit : AnswerLimit.error).readableBytesView)
        } catch is NIOTooManyBytesError {
            guard success else { return answer }
            throw ClientError.unreadableAnswer("more than \(limit / 1_048_576) MiB from \(route), the most this tool accepts there")
        } catch let error as CancellationError {
            throw error
        } catch {
            throw classify(error, answering: true)
        }
        return answer
    }

    static func nanoseconds(_ d: Duration) -> Int64 {
        max(0, d.components.seconds) * 1_000_000_000 + max(0, d.components.attoseconds) / 1_000_000_000
    }

    /// A connection that was refused or never made: the request was not sent (`sendRaw` may try it again).
    struct NotSent: Error { let error: ClientError }

    /// The request waited for a connection of this process's pool past the connect timeout and was never sent.
    struct PoolWait: Error {}

    /// A temporary failure whose answer said how many seconds to wait (`Retry-After`).
    struct RetryAfter: Error {
        let error: ClientError
        let seconds: UInt64
    }
}
