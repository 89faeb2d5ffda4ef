import AsyncHTTPClient
import Foundation
import NIOCore
import VaultAPI
import VaultCore
import VaultCrypto

/// What the live event stream says, as a client acts on it (Docs/events.md §3). None of it is trusted
/// beyond "pull now": the pull verifies everything as it does without the stream.
public enum LiveUpdate: Sendable, Equatable {
    /// The stream is live. `resumed` is false when the server had nothing to resume from (a first
    /// connection, or a reconnection before any id arrived): the client pulls in full.
    case ready(resumed: Bool)
    /// An owner the caller reads has a newer sequence (given on the owner's own stream only).
    case change(owner: UUID, sequence: UInt64?)
    /// A share the caller is party to changed state; `patient` is the share's patient as the server named
    /// it (nil from a server that does not), a hint of whom to re-read, nothing more.
    case share(id: UUID, state: String, patient: UUID?)
    /// Events may have been missed: pull every owner and re-read the shares.
    case resync(reason: String)
    /// The account or session ended; the stream ends after this.
    case account(reason: String)
}

/// Reads `GET /v1/events` with the transport's server, trust and connection timeout: resumes with
/// `Last-Event-ID`, reconnects after a failure or an end with capped exponential back-off and full
/// jitter, treats 45 s without a byte as a dead connection, and ends on 401/403 (throwing
/// `ClientError.notPermitted`) or after an `account` event. Every byte from the server may be crafted:
/// see `SSEParser` for the bounds; an unknown event is ignored, a known one with unreadable data is
/// taken as a `resync`.
public struct EventStream: Sendable {
    public struct Policy: Sendable {
        /// The first reconnection waits up to this long; each failure doubles it.
        public var baseDelay: Duration = .milliseconds(500)
        /// The longest wait between connections.
        public var maxDelay: Duration = .seconds(30)
        /// A connection that sends nothing for this long is dropped.
        public var silence: Duration = LiveEvent.silenceLimit
        /// A connection that stayed up this long resets the back-off.
        public var stableAfter: Duration = .seconds(60)
        public init() {}
    }

    public let transport: Transport
    let token: String
    let policy: Policy
    let initialID: String?

    public init(transport: Transport, token: String, lastEventID: String? = nil, policy: Policy = Policy()) {
        self.transport = transport
        self.token = token
        self.policy = policy
        self.initialID = lastEventID.flatMap { LiveEvent.isValidID($0) ? $0 : nil }
    }

    /// The updates until the consumer stops, the account ends, or the server refuses the session.
    /// `onRetry` is told of every failure that leads to a reconnection (a tool says so once).
    public func updates(onRetry: @escaping @Sendable (ClientError) -> Void = { _ in }) -> AsyncThrowingStream<LiveUpdate, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    try await self.run(continuation, onRetry: onRetry)
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// What one connection ended with.
    enum End {
        case account
        case retry(ClientError, retryAfter: Duration?)
    }

    private func run(_ out: AsyncThrowingStream<LiveUpdate, any Error>.Continuation, onRetry: @Sendable (ClientError) -> Void) async throws {
        var lastID = initialID
        var attempt = 0
        while !Task.isCancelled {
            let opened = ContinuousClock.now
            let end = try await connect(lastID: &lastID, out)
            guard case let .retry(failure, retryAfter) = end else { return }
            onRetry(failure)
            attempt = ContinuousClock.now - opened >= policy.stableAfter ? 1 : attempt + 1
            try await Task.sleep(for: max(delay(attempt), min(retryAfter ?? .zero, policy.maxDelay)))
        }
    }

    /// Full jitter: a random wait up to `min(maxDelay, baseDelay × 2^attempt)`.
    func delay(_ attempt: Int) -> Duration {
        let base = Transport.nanoseconds(policy.baseDelay) / 1_000_000
        let cap = min(Transport.nanoseconds(policy.maxDelay) / 1_000_000, base << Int64(min(attempt, 20)))
        return .milliseconds(Int64(RandomBytes.uniform(UInt32(clamping: max(1, cap)))))
    }

    /// One connection: its updates, until it ends one way or another.
    private func connect(lastID: inout String?, _ out: AsyncThrowingStream<LiveUpdate, any Error>.Continuation) async throws -> End {
        var request = HTTPClientRequest(url: transport.baseURL + Routes.events)
        request.headers.add(name: "Accept", value: "text/event-stream")
        request.headers.add(name: CareVaultVersion.clientHeader, value: CareVaultVersion.release)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let lastID { request.headers.add(name: "Last-Event-ID", value: lastID) }
        let resumed = lastID != nil
        let response: HTTPClientResponse
        do {
            let http = try await transport.client(read: policy.silence)
            response = try await http.execute(request, deadline: .now() + .nanoseconds(Transport.nanoseconds(policy.silence)))
        } catch let error as CancellationError {
            throw error
        } catch {
            await transport.forgetIdentity(after: error)
            return .retry(transport.classify(error), retryAfter: nil)
        }
        let status = Int(response.status.code)
        guard status == 200 else {
            let body = (try? await response.body.collect(upTo: Transport.AnswerLimit.error)).map { Array($0.readableBytesView) } ?? []
            let retryAfter = response.headers.first(name: "Retry-After")
            let failure = Transport.map(status: status, body: body, retryAfter: retryAfter)
            guard case .temporary = failure else { throw failure }
            return .retry(failure, retryAfter: retryAfter.flatMap { Int64($0) }.map { .seconds(max(0, $0)) })
        }
        let type = response.headers.first(name: "Content-Type")?.lowercased() ?? ""
        guard type.hasPrefix("text/event-stream") else {
            return .retry(.unreadableAnswer("expected an event stream from GET \(Routes.events)"), retryAfter: nil)
        }
        var parser = SSEParser()
        do {
            for try await chunk in response.body {
                for event in try parser.feed(chunk.readableBytesView) {
                    if let id = event.id { lastID = id }
                    guard let update = Self.update(event, resumed: resumed) else { continue }
                    out.yield(update)
                    if case .account = update { return .account }
                }
            }
        } catch let error as CancellationError {
            throw error
        } catch is SSEParser.Failure {
            return .retry(.unreadableAnswer("the event stream sent a line or event past the limits"), retryAfter: nil)
        } catch {
            return .retry(transport.classify(error, answering: true), retryAfter: nil)
        }
        return .retry(.cutOff, retryAfter: nil)
    }

    /// The update an event stands for; nil for an event this client does not know.
    static func update(_ event: SSEParser.Event, resumed: Bool) -> LiveUpdate? {
        guard let name = LiveEvent.Name(rawValue: event.name) else { return nil }
        let data = Data(event.data.utf8)
        let decoder = JSONDecoder()
        switch name {
        case .ready: return .ready(resumed: resumed)
        case .change:
            guard let c = try? decoder.decode(ChangeEventData.self, from: data) else { return .resync(reason: "unreadable change event") }
            return .change(owner: c.owner, sequence: c.sequence)
        case .share:
            guard let s = try? decoder.decode(ShareEventData.self, from: data), ShareState(rawValue: s.state) != nil else {
                return .resync(reason: "unreadable share event")
            }
            return .share(id: s.share, state: s.state, patient: s.patient)
        case .resync:
            let reason = (try? decoder.decode(ReasonEventData.self, from: data))?.reason ?? "unreadable"
            return .resync(reason: ClientError.printable(reason, limit: 60))
        case .account:
            let reason = (try? decoder.decode(ReasonEventData.self, from: data))?.reason ?? "unreadable"
            return .account(reason: ClientError.printable(reason, limit: 60))
        }
    }
}
