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

/// How a failed exchange becomes a `ClientError`: connection-level failures (`classify`) and HTTP
/// statuses with the API's error codes (`map`), the one place either is decided.
extension Transport {
    /// Whether `error` came before any byte of the request could leave: a connection refused, unreachable
    /// or not made in time.
    static func neverSent(_ error: any Error) -> Bool {
        if let e = error as? IOError { return [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL].contains(e.errnoCode) }
        // A connection by name (the identity check's): the name did not resolve, or no address took it.
        if let e = error as? NIOConnectionError {
            return e.connectionErrors.isEmpty ? e.dnsAError != nil || e.dnsAAAAError != nil : e.connectionErrors.allSatisfy { neverSent($0.error) }
        }
        if let e = error as? HTTPClientError { return e == .connectTimeout }
        if let e = error as? ChannelError, case .connectTimeout = e { return true }
        return false
    }

    /// Connection-level failures. Unreachable (69) when no connection could be made; temporary (75) when
    /// one was made and the answer broke, was malformed or did not come in time.
    func classify(_ error: any Error, answering: Bool = false) -> ClientError {
        let unreachable = ClientError.serverUnreachable("connection refused or no route to the server")
        if error is CancellationError { return timedOut }
        if error is HTTPParserError { return .cutOff }
        if let e = error as? HTTPClientError {
            switch e {
            case .connectTimeout: return .serverUnreachable("no connection within \(Self.seconds(connectTimeout)) s")
            case .deadlineExceeded, .cancelled: return timedOut
            case .readTimeout: return .temporary("the server stopped answering for \(Self.seconds(readTimeout)) s")
            case .writeTimeout, .remoteConnectionClosed, .uncleanShutdown: return .cutOff
            // Nothing was sent: every connection this process may open to the server was busy for too long.
            case .getConnectionFromPoolTimeout: return .poolBusy
            default: return answering ? .cutOff : .serverUnreachable("the connection failed")
            }
        }
        // Refused, no route, no such address: nothing answered. Any other socket error (reset, broken pipe,
        // a connection the server already closed) came from a server that is there but broke off.
        if let e = error as? IOError {
            return !answering && [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT, EADDRNOTAVAIL].contains(e.errnoCode) ? unreachable : .cutOff
        }
        if let e = error as? ChannelError {
            if case .connectTimeout = e, !answering { return .serverUnreachable("no connection within \(Self.seconds(connectTimeout)) s") }
            return .cutOff
        }
        if let e = error as? NIOConnectionError, e.connectionErrors.isEmpty { return .serverUnreachable("the server's name could not be looked up") }
        if let e = error as? NIOConnectionError, e.connectionErrors.allSatisfy({ Self.neverSent($0.error) }) { return unreachable }
        if let e = error as? IdentityProbe.Failure {
            switch e {
            case .notNamed, .noTLS: return .serverUnreachable(certificateProblem(e))
            case .closed: return .cutOff
            case .timedOut: return .temporary("the server did not complete a secure connection within \(Self.seconds(readTimeout)) s")
            }
        }
        if answering { return .cutOff }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            return .serverUnreachable(certificateProblem(error))
        }
        let text = "\(error)".lowercased()
        if text.contains("certificate") || text.contains("ssl") || text.contains("tls") {
            return .serverUnreachable("the secure connection failed; check the server's certificate")
        }
        return unreachable
    }

    /// A TLS failure in plain words: whose certificate (the host and port of the server URL), and why it was
    /// refused, with what to do.
    func certificateProblem(_ error: any Error) -> String {
        let url = URL(string: baseURL)
        let host = url?.host ?? baseURL
        let target = url?.port.map { "\(host):\($0)" } ?? host
        let text = "\(error)"
        if let problem = identityProblem(error, target: target, host: host) { return problem }
        if let e = error as? NIOSSLExtraError, e == .failedToValidateHostname {
            return "the certificate of \(target) is not trusted: it is not issued for \(host) (use the name it is issued for in --server)"
        }
        if text.contains("CERTIFICATE_VERIFY_FAILED") {
            let hint = trust == nil ? "pass --ca-cert FILE if a private CA signed it" : "it is not signed by the CA of --ca-cert"
            return "the certificate of \(target) is not trusted: \(hint)"
        }
        return "the certificate of \(target) is not trusted or the secure connection failed (\(text)); check it, and --ca-cert"
    }

    /// A random idempotency key: 128 bits, base64url (22 characters).
    static func newIdempotencyKey() -> String { Base64URL.encode(RandomBytes.bytes(count: 16)) }

    /// The one mapping from HTTP status and API error code to `ClientError`. The server's message is
    /// printed, so it is made safe to print first.
    static func map(status: Int, body: [UInt8], retryAfter: String?) -> ClientError {
        let detail = try? decoder.decode(APIErrorBody.self, from: Data(body)).error
        let message = detail.map { ClientError.printable($0.message) } ?? (status >= 500 ? "the server failed (HTTP \(status))" : "HTTP \(status)")
        let code = detail?.code
        switch (status, code) {
        case (426, _), (_, .upgradeRequired?):
            return .upgradeRequired(detail.map { ClientError.printable($0.message) } ?? "the server serves only newer clients (HTTP 426)")
        case (_, .pendingApproval?), (_, .accountRejected?), (_, .shareNotActive?), (_, .invalidCredentials?), (401, _), (403, _):
            return .notPermitted(code: code, message)
        // The first try of this request is still running on the server: the retry gets its answer shortly.
        case (429, _), (500..<600, _), (409, .requestInProgress?):
            let wait = retryAfter.map { " (retry after \(ClientError.printable($0, limit: 20)) s)" } ?? ""
            return .temporary(message + wait)
        case (404, _): return .notFound(message)
        case (409, _): return .conflict(message)
        case (_, .invalidSignature?), (_, .invalidApproval?): return .integrity(message)
        case (400..<500, _): return .invalidRequest(message)
        default: return .server(code: code, message)
        }
    }
}
