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

        public var description: String {
            switch self {
            case let .notNamed(host, names):
                let listed = names.isEmpty ? "no names" : names.joined(separator: ", ")
                return
                    "its certificate is not issued for \(host) (it names \(listed)); an IP address entry counts only when the address itself is given"
            case .noTLS: return "the server does not offer TLS"
            case .closed: return "the server closed the connection during the TLS handshake"
            }
        }
    }

    /// Connects to `host`:`port`, sends `preamble` first and expects the one byte `accept` back when given
    /// (PostgreSQL's SSL request and its `S`), completes a TLS handshake under `configuration` (the chain
    /// and NIOSSL's own name check), and checks that the leaf certificate names `host` as given. Returns the
    /// IP address the connection reached, which passed. Connection and TLS errors are NIO's and NIOSSL's.
    public static func check(
        host: String,
        port: Int,
        configuration: TLSConfiguration,
        preamble: (bytes: [UInt8], accept: UInt8)? = nil,
        timeout: TimeAmount
    ) async throws -> String {
        let context = try NIOSSLContext(configuration: configuration)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(timeout)
            .connect(host: ServerName.bare(host), port: port)
            .get()
        defer { channel.close(promise: nil) }
        let deadline = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        defer { deadline.cancel() }
        if let preamble {
            // Every promise ends, one way or another: the handler's end, or the failure that kept it out.
            let answer = channel.eventLoop.makePromise(of: UInt8.self)
            do {
                try await channel.pipeline.addHandler(FirstByte(answer), name: "first-byte").get()
                try await channel.writeAndFlush(channel.allocator.buffer(bytes: preamble.bytes)).get()
            } catch {
                answer.fail(error)
                throw error
            }
            guard try await answer.futureResult.get() == preamble.accept else { throw Failure.noTLS }
            try await channel.pipeline.removeHandler(name: "first-byte").get()
        }
        let done = channel.eventLoop.makePromise(of: Void.self)
        let sniHost: String? = ServerName.isAddress(host) ? nil : ServerName.bare(host)
        do {
            try await channel.eventLoop.submit {
                try channel.pipeline.syncOperations.addHandler(HandshakeEnd(done))
                try channel.pipeline.syncOperations.addHandler(
                    try NIOSSLClientHandler(context: context, serverHostname: sniHost),
                    position: .first
                )
            }.get()
        } catch {
            done.fail(error)
            throw error
        }
        try await done.futureResult.get()
        guard let leaf = try await channel.nioSSL_peerCertificate().get() else { throw Failure.closed }
        guard ServerName.certificate(leaf, names: host) else { throw Failure.notNamed(host: host, names: ServerName.listed(leaf)) }
        return channel.remoteAddress?.ipAddress ?? ServerName.bare(host)
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
