import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// One TLS handshake made only to check the server's identity strictly (`ServerName`): the transports that
/// carry the real traffic (AsyncHTTPClient, PostgresNIO) run NIOSSL's check and offer no hook for another.
public enum IdentityProbe {
    /// Why the probe refused the server.
    public enum Failure: Error, CustomStringConvertible {
        /// The certificate chains to a trusted CA but does not name the host as given; its names.
        case notNamed(host: String, names: [String])
        /// A server that does not take TLS where it must (PostgreSQL's answer `N` to the SSL request).
        case noTLS
        /// The connection closed before the handshake ended.
        case closed
        /// The connection and handshake did not end within the time given.
        case timedOut

        public var description: String {
            switch self {
            case let .notNamed(host, names):
                let listed = names.isEmpty ? "no names" : names.joined(separator: ", ")
                return
                    "its certificate is not issued for \(host) (it names \(listed)); an IP address entry counts only when the address itself is given"
            case .noTLS: return "the server does not offer TLS"
            case .closed: return "the server closed the connection during the TLS handshake"
            case .timedOut: return "the server did not complete the TLS handshake in time"
            }
        }
    }

    /// Connects to `host`:`port`, sends `preamble` first and expects the one byte `accept` back when given
    /// (PostgreSQL's SSL request and its `S`), completes a TLS handshake under `configuration` (the chain
    /// and NIOSSL's own name check), and checks that the leaf certificate names `host` as given. Returns the
    /// IP address the connection reached, which passed. Connection and TLS errors are NIO's and NIOSSL's.
    /// The connection must be made within `connectTimeout`, and the rest (the SSL request, the handshake)
    /// be done within `handshakeTimeout` of it.
    public static func check(
        host: String,
        port: Int,
        configuration: TLSConfiguration,
        preamble: (bytes: [UInt8], accept: UInt8)? = nil,
        connectTimeout: TimeAmount,
        handshakeTimeout: TimeAmount
    ) async throws -> String {
        let timeouts = (connectTimeout, handshakeTimeout)
        do {
            return try await attempt(host: host, port: port, configuration: configuration, preamble: preamble, timeouts: timeouts)
        } catch let error as NIOSSLExtraError where error == .failedToValidateHostname {
            // NIOSSL refused the names without saying them: a second handshake, the chain still checked,
            // reads them for the message. Nothing of it is used but the names.
            var reading = configuration
            reading.certificateVerification = .noHostnameVerification
            do {
                _ = try await attempt(host: host, port: port, configuration: reading, preamble: preamble, timeouts: timeouts)
            } catch let failure as Failure {
                if case .notNamed = failure { throw failure }
            } catch {}
            throw error
        }
    }

    private static func attempt(
        host: String,
        port: Int,
        configuration: TLSConfiguration,
        preamble: (bytes: [UInt8], accept: UInt8)?,
        timeouts: (connect: TimeAmount, handshake: TimeAmount)
    ) async throws -> String {
        let context = try NIOSSLContext(configuration: configuration)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(timeouts.connect)
            .connect(host: ServerName.bare(host), port: port)
            .get()
        defer { channel.close(promise: nil) }
        let expired = NIOLockedValueBox(false)
        let deadline = channel.eventLoop.scheduleTask(in: timeouts.handshake) {
            expired.withLockedValue { $0 = true }
            channel.close(promise: nil)
        }
        defer { deadline.cancel() }
        do {
            return try await handshake(channel, host: host, context: context, preamble: preamble).get()
        } catch {
            // The deadline closed the connection: say so, not that the server closed it.
            if expired.withLockedValue({ $0 }) { throw Failure.timedOut }
            throw error
        }
    }

    /// The SSL request (when given), the handshake and the check, chained on the connection's event loop: no
    /// step waits for a thread of the process's shared pool, so only the server's pace counts against the
    /// deadline. Every promise made here ends on every path.
    private static func handshake(
        _ channel: any Channel,
        host: String,
        context: NIOSSLContext,
        preamble: (bytes: [UInt8], accept: UInt8)?
    ) -> EventLoopFuture<String> {
        let loop = channel.eventLoop
        var ready = loop.makeSucceededVoidFuture()
        if let preamble {
            let answer = loop.makePromise(of: UInt8.self)
            ready = loop.submit { try channel.pipeline.syncOperations.addHandler(FirstByte(answer), name: "first-byte") }
                .flatMap { channel.writeAndFlush(channel.allocator.buffer(bytes: preamble.bytes)) }
                .flatMapError { error in
                    answer.fail(error)
                    return loop.makeFailedFuture(error)
                }
                .flatMap { answer.futureResult }
                .flatMapThrowing { byte in guard byte == preamble.accept else { throw Failure.noTLS } }
                .flatMap { channel.pipeline.removeHandler(name: "first-byte") }
        }
        let sniHost: String? = ServerName.isAddress(host) ? nil : ServerName.bare(host)
        return ready.flatMap {
            let done = loop.makePromise(of: Void.self)
            do {
                try channel.pipeline.syncOperations.addHandler(HandshakeEnd(done))
                try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: sniHost), position: .first)
            } catch {
                done.fail(error)
            }
            return done.futureResult
        }
        .flatMap { channel.nioSSL_peerCertificate() }
        .flatMapThrowing { leaf in
            guard let leaf else { throw Failure.closed }
            guard ServerName.certificate(leaf, names: host) else { throw Failure.notNamed(host: host, names: ServerName.listed(leaf)) }
            // The address to pin every later connection to; without one there is nothing checked to pin.
            guard let address = channel.remoteAddress?.ipAddress else { throw Failure.closed }
            return address
        }
    }

    /// Takes the first byte the server sends (the answer to the preamble).
    private final class FirstByte: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        let promise: EventLoopPromise<UInt8>
        init(_ promise: EventLoopPromise<UInt8>) { self.promise = promise }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = unwrapInboundIn(data)
            if let byte = buffer.readInteger(as: UInt8.self) { promise.succeed(byte) }
        }
        func channelInactive(context: ChannelHandlerContext) { promise.fail(Failure.closed) }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { promise.fail(error) }
    }

    /// Ends when the handshake completed, or failed, or the connection closed.
    private final class HandshakeEnd: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let promise: EventLoopPromise<Void>
        init(_ promise: EventLoopPromise<Void>) { self.promise = promise }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case .handshakeCompleted = event as? TLSUserEvent { promise.succeed(()) }
            context.fireUserInboundEventTriggered(event)
        }
        func channelInactive(context: ChannelHandlerContext) { promise.fail(Failure.closed) }
        func errorCaught(context: ChannelHandlerContext, error: any Error) { promise.fail(error) }
    }
}
