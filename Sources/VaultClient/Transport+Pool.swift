import AsyncHTTPClient
import Foundation
import NIOSSL

/// One HTTP client per pair of timeouts, trust and pinned address, kept for the life of the process: no transport can forget to
/// shut one down, and a tool (one budget) uses one pool of connections. A refused connection fails at
/// once (the transport's retry policy decides what to retry) instead of the pool retrying until the deadline.
final class ClientPool: @unchecked Sendable {
    private let lock = NSLock()
    private var clients: [String: HTTPClient] = [:]

    /// Every connection of a client to `host` goes to `address` (the one whose certificate was checked,
    /// `ServerIdentities`); the certificate is still checked against `host` on each.
    struct Pin: Sendable {
        var host: String
        var address: String
    }

    func client(connect: Duration, read: Duration, trust: PrivateCA?, pin: Pin?) -> HTTPClient {
        let (c, r) = (Transport.nanoseconds(connect), Transport.nanoseconds(read))
        let key = "\(c) \(r) \(trust?.path ?? "") \(pin.map { "\($0.host)=\($0.address)" } ?? "")"
        lock.lock()
        defer { lock.unlock() }
        if let client = clients[key] { return client }
        var config = HTTPClient.Configuration()
        config.timeout = .init(connect: .nanoseconds(c), read: .nanoseconds(r))
        if trust != nil { config.tlsConfiguration = Self.tls(trust) }
        if let pin { config.dnsOverride = [pin.host: pin.address] }
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

extension ClientPool {
    /// The TLS settings of `trust` (the system's roots without one): the requests' and the identity check's
    /// (`ServerIdentities`) alike, so the address checked is checked under the trust the requests use.
    static func tls(_ trust: PrivateCA?) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let trust { tls.trustRoots = .certificates(trust.certificates) }
        return tls
    }
}

extension Transport {
    static let pool = ClientPool()
}

/// The CA certificates of `--ca-cert`, read when the transport is made so that a bad file is a usage error
/// before any request.
struct PrivateCA: Sendable {
    let path: String
    let certificates: [NIOSSLCertificate]

    init(path: String) throws {
        let certificates: [NIOSSLCertificate]
        do { certificates = try NIOSSLCertificate.fromPEMFile(path) } catch {
            let why = FileManager.default.isReadableFile(atPath: path) ? "it is not a PEM certificate file" : "cannot read the file"
            throw ClientError.invalidRequest("the CA certificate '\(path)' cannot be used: \(why)")
        }
        guard !certificates.isEmpty else { throw ClientError.invalidRequest("the CA certificate '\(path)' holds no PEM certificate") }
        self.path = path
        self.certificates = certificates
    }
}
