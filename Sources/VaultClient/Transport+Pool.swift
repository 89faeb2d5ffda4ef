import AsyncHTTPClient
import Foundation
import NIOSSL

/// One HTTP client per pair of timeouts and trust, kept for the life of the process: no transport can forget to
/// shut one down, and a tool (one budget) uses one pool of connections. A refused connection fails at
/// once (the transport's retry policy decides what to retry) instead of the pool retrying until the deadline.
final class ClientPool: @unchecked Sendable {
    private let lock = NSLock()
    private var clients: [String: HTTPClient] = [:]

    func client(connect: Duration, read: Duration, trust: PrivateCA?) -> HTTPClient {
        let (c, r) = (Transport.nanoseconds(connect), Transport.nanoseconds(read))
        let key = "\(c) \(r) \(trust?.path ?? "")"
        lock.lock()
        defer { lock.unlock() }
        if let client = clients[key] { return client }
        var config = HTTPClient.Configuration()
        config.timeout = .init(connect: .nanoseconds(c), read: .nanoseconds(r))
        if let trust {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(trust.certificates)
            config.tlsConfiguration = tls
        }
        config.redirectConfiguration = .disallow
        config.connectionPool.retryConnectionEstablishment = false
        // A kept-alive connection is given up before the server closes it: the server allows 10 s from
        // one answer to the next request's head (`ConnectionLimits.headerTimeout`), and a request written
        // onto a connection the server is closing breaks off (and is tried again, a POST too).
        config.connectionPool.idleTimeout = .seconds(5)
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
        clients[key] = client
        return client
    }
}

extension Transport {
    static let pool = ClientPool()
}
