import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore
import NIOHTTPTypes
import NIOSSL
import VaultAPI

/// How long a connection may take to send a request and how many may be open at once
/// (Docs/operations.md §"Timeouts and connections"): a client that opens connections and sends
/// nothing, or sends a request a byte at a time, holds a descriptor only for a bounded time.
public struct ConnectionLimits: Sendable, Equatable {
    /// From a connection's opening, or the end of the previous response, to the end of the next request's head.
    public var headerTimeout: Duration
    /// From a request's head to the end of its body.
    public var bodyTimeout: Duration
    /// A connection with nothing read or written for this long is closed (HTTP/1.1 and HTTP/2).
    public var idleTimeout: Duration
    /// The most connections open at once; past it the server stops accepting until one closes.
    public var maxConnections: Int

    public init(
        headerTimeout: Duration = .seconds(10),
        bodyTimeout: Duration = .seconds(120),
        idleTimeout: Duration = .seconds(60),
        maxConnections: Int = 512
    ) {
        self.headerTimeout = headerTimeout
        self.bodyTimeout = bodyTimeout
        self.idleTimeout = idleTimeout
        self.maxConnections = maxConnections
    }

    /// The HTTP/1.1 server, or HTTPS with HTTP/2 through ALPN when `tls` is given, with these limits on
    /// every connection (and on every HTTP/2 stream).
    func serverBuilder(tls: TLSConfiguration?) throws -> HTTPServerBuilder {
        let header = TimeAmount(headerTimeout)
        let body = TimeAmount(bodyTimeout)
        let http1 = HTTP1Channel.Configuration(
            additionalChannelHandlers: [RequestDeadlineHandler(header: header, body: body)],
            idleTimeout: TimeAmount(idleTimeout)
        )
        guard let tls else { return .http1(configuration: http1) }
        let configuration = HTTP2UpgradeChannel.Configuration(idleTimeout: idleTimeout, streamConfiguration: http1)
        // The deadlines above start once TLS is up: a connection that never finishes its handshake would
        // otherwise hold a slot of the connection cap for ever.
        return HTTPServerBuilder { responder in
            TLSHandshakeDeadline(
                inner: try HTTP2UpgradeChannel(tlsConfiguration: tls, configuration: configuration, responder: responder),
                timeout: header
            )
        }
    }
}

/// Closes a TLS connection that has sent no request bytes `timeout` after it was accepted (a handshake
/// never finished, or never followed by anything).
struct TLSHandshakeDeadline: ServerChildChannel {
    typealias Value = HTTP2UpgradeChannel.Value
    let inner: HTTP2UpgradeChannel
    let timeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let tls = try channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
            try channel.pipeline.syncOperations.addHandler(HandshakeDeadlineHandler(timeout: timeout), position: .after(tls))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async { await inner.handle(value: value, logger: logger) }
}

/// Sits right after the TLS handler: closes the connection unless decrypted bytes (a request, or HTTP/2's
/// preface) arrive in time, which needs a completed handshake.
final class HandshakeDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    let timeout: TimeAmount
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { context.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) { deadline?.cancel() }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        deadline?.cancel()
        deadline = nil
        context.fireChannelRead(data)
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}

/// Closes a connection whose next request head has not arrived `header` after the connection opened or
/// the previous response ended, or whose request body has not ended `body` after its head. Hummingbird's
/// idle timeout alone would let a body sent a byte a minute hold the connection for ever.
///
/// A response that ends before its request's body (an early 413, 401 or 404) is followed by reading and
/// dropping the rest of the body, up to `drainLimit` bytes (then the connection is closed): a client
/// that writes its whole body before it reads (Python's urllib, with `Connection: close`) would
/// otherwise block on a server that no longer reads, and never see the answer.
final class RequestDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let header: TimeAmount
    let body: TimeAmount
    private var deadline: Scheduled<Void>?
    /// A request's head was read and its end not yet.
    private var reading = false
    /// Requests read whose response has not ended.
    private var unanswered = 0
    /// Body bytes read and dropped after the response ended, or nil when not draining.
    private var drained: Int?
    static let drainLimit = APILimits.maxBodyBytes

    init(header: TimeAmount, body: TimeAmount) {
        self.header = header
        self.body = body
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context, header) }
    }

    func handlerRemoved(context: ChannelHandlerContext) { disarm() }

    func channelActive(context: ChannelHandlerContext) {
        arm(context, header)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            reading = true
            unanswered += 1
            drained = nil
            arm(context, body)
        case .body(let part):
            guard let sofar = drained else { break }
            drained = sofar + part.readableBytes
            if sofar + part.readableBytes > Self.drainLimit { context.close(promise: nil) }
            return
        case .end:
            reading = false
            drained = nil
            // Answered before the body ended (an early refusal): the next request's head is due now.
            if unanswered == 0 { arm(context, header) } else { disarm() }
        }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // The handler no longer reads a body it answered already: keep the socket read until it ends.
        if drained != nil { context.read() }
        context.fireChannelReadComplete()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            unanswered = max(0, unanswered - 1)
            if !reading, unanswered == 0 { arm(context, header) }
            // Only the response to the request still being read starts a drain: with requests pipelined, the
            // end of an earlier one's response must leave the current body to its handler.
            if reading, unanswered == 0, drained == nil {
                drained = 0
                context.write(data, promise: promise)
                context.flush()
                context.read()
                return
            }
        }
        context.write(data, promise: promise)
    }

    private func arm(_ context: ChannelHandlerContext, _ amount: TimeAmount) {
        deadline?.cancel()
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: amount) {
            context.close(promise: nil)
        }
    }

    private func disarm() {
        deadline?.cancel()
        deadline = nil
    }
}
