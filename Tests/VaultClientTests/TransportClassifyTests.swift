import AsyncHTTPClient
import Foundation
import Testing

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

    @Test func anAnswerBrokenOffIsStillACutOff() {
        for error in [HTTPClientError.remoteConnectionClosed, .uncleanShutdown, .writeTimeout] {
            #expect(transport.classify(error) == ClientError.cutOff)
        }
    }
}
