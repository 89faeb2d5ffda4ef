import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// The one error type of the client SDK. Every HTTP status and API error code is mapped to it in
/// `Transport`, every integrity failure of the crypto layers in `ClientError.integrity`, and the CLIs
/// map it to their documented exit statuses.
public enum ClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The server could not be reached at all (connection refused, no route, DNS).
    case serverUnreachable(String)
    /// A failure worth retrying later (timeouts, 429, 502-504): already retried with backoff.
    case temporary(String)
    /// Not allowed: wrong password, not yet approved, rejected, revoked or expired share, wrong role.
    case notPermitted(code: APIErrorCode?, String)
    /// Tampered, forged or inconsistent data: a signature, MAC, certificate or approval did not verify.
    case integrity(String)
    /// The thing asked for does not exist.
    case notFound(String)
    /// The request conflicts with the server's state (name taken, share already open, …).
    case conflict(String)
    /// The request itself was wrong (bad input caught by the server or the client).
    case invalidRequest(String)
    /// Local state is missing or unusable (not logged in, corrupt profile, …).
    case localState(String)
    /// Anything else the server said.
    case server(code: APIErrorCode?, String)

    /// The message the CLIs print.
    public var description: String {
        switch self {
        case let .serverUnreachable(m): return "server unreachable: \(m)"
        case let .temporary(m): return "temporary failure: \(m)"
        case let .notPermitted(_, m): return "not permitted: \(m)"
        case let .integrity(m): return "integrity failure: \(m)"
        case let .notFound(m): return "not found: \(m)"
        case let .conflict(m): return "conflict: \(m)"
        case let .invalidRequest(m): return m
        case let .localState(m): return m
        case let .server(_, m): return "server error: \(m)"
        }
    }

    /// Maps an error of the crypto or domain layers onto the client error.
    public static func from(_ error: any Error) -> ClientError {
        switch error {
        case let e as ClientError: return e
        case let e as EnvelopeError: return .integrity(e.description)
        case TrustError.wrongPassword: return .notPermitted(code: .invalidCredentials, "wrong password")
        case let e as TrustError: return .integrity(e.description)
        case let e as CryptoError: return .integrity(e.description)
        default: return .localState("\(error)")
        }
    }
}
