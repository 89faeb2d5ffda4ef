import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import Testing
import VaultTLS

@testable import VaultClient

/// What a connection-level failure is called: a tool's message must point at the right cause.
@Suite("Client: connection failures named by cause")
struct TransportClassifyTests {
    let transport: Transport

    init() throws { transport = try Transport(baseURL: "http://127.0.0.1:9") }

    @Test func aRequestThatWaitedForAConnectionOfItsOwnPoolIsNotCalledACutOffAnswer() {
        let e = transport.classify(HTTPClientError.getConnectionFromPoolTimeout)
        #expect(e == ClientError.poolBusy)
        #expect(e != ClientError.cutOff)
        guard case .temporary = e else {
            Issue.record("a busy pool is temporary (75), like a cut-off answer: \(e)")
            return
        }
    }

    /// A connection made by name (the identity check's, Docs/operations.md §1) that no address took was not
    /// sent: a server restarting is ridden through over https to a host name as over an address.
    @Test func aRefusalOfAConnectionByNameWasNeverSent() async throws {
        let port = try await Self.closedPort()
        do {
            _ = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "localhost", port: port).get()
            Issue.record("a closed port took the connection")
        } catch {
            #expect(error is NIOConnectionError, "\(type(of: error))")
            #expect(Transport.neverSent(error))
            guard case .serverUnreachable = transport.classify(error) else {
                Issue.record("\(transport.classify(error))")
                return
            }
        }
    }

    /// The identity check's own ends are told apart: a certificate for other names is a refusal (69), a
    /// handshake cut off or out of time is temporary.
    @Test func theIdentityChecksFailuresAreNamedByCause() {
        let notNamed = IdentityProbe.Failure.notNamed(host: "vault.internal", names: ["IP:127.0.0.1"])
        let refused = transport.classify(notNamed)
        #expect(refused == .serverUnreachable(transport.certificateProblem(notNamed)))
        #expect("\(refused)".contains("is not issued for"), "\(refused)")
        #expect(transport.classify(IdentityProbe.Failure.closed) == .cutOff)
        guard case .temporary = transport.classify(IdentityProbe.Failure.timedOut) else {
            Issue.record("a handshake out of time is temporary")
            return
        }
    }

    /// A loopback port nothing listens on.
    static func closedPort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress?.port ?? 9
        try await channel.close()
        return port
    }

    @Test func anAnswerBrokenOffIsStillACutOff() {
        for error in [HTTPClientError.remoteConnectionClosed, .uncleanShutdown, .writeTimeout] {
            #expect(transport.classify(error) == ClientError.cutOff)
        }
    }
}
