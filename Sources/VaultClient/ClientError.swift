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
    /// The server serves only newer clients (426 `upgrade_required`, Docs/design.md §8): upgrade this tool.
    case upgradeRequired(String)

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
        case let .upgradeRequired(m): return "upgrade required: \(m)"
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

/// The plain words for answers that are not what the API promises (Docs/design.md §7): the wording the
/// tools print, kept in one place so the CLI can recognise the case without matching on text elsewhere.
extension ClientError {
    static let unreadablePrefix = "the server sent an answer this tool cannot read"
    static let cutOff = ClientError.temporary("the server's answer was cut off or malformed; try again")
    static let poolBusy = ClientError.temporary(
        "no connection to the server came free in time: this process has as many open to it as it allows; try again"
    )

    /// An answer that does not decode, has the wrong content type or is too large: an integrity failure,
    /// never retried, since asking the same server again gives the same answer.
    static func unreadableAnswer(_ detail: String) -> ClientError { .integrity("\(unreadablePrefix) (\(detail))") }

    /// True for an answer the server sent that is not what the API promises (wrong content type, not the
    /// expected JSON, too large), as opposed to a signature or MAC that failed.
    public var isUnreadableAnswer: Bool {
        if case let .integrity(m) = self { return m.hasPrefix(Self.unreadablePrefix) }
        return false
    }

    /// A decoding failure in plain words: which JSON field was missing or wrong, never the Swift types
    /// involved (the tools print this, and the server chose the bytes).
    static func plainWords(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "a value is invalid" }
        func field(_ path: [any CodingKey]) -> String {
            let names = path.map { $0.intValue.map(String.init) ?? $0.stringValue }
            return names.isEmpty ? "the answer" : "the field '\(names.joined(separator: "."))'"
        }
        switch error {
        case let .keyNotFound(key, context): return "\(field(context.codingPath + [key])) is missing"
        case let .valueNotFound(_, context): return "\(field(context.codingPath)) is empty"
        case let .typeMismatch(_, context): return "\(field(context.codingPath)) has the wrong kind of value"
        case let .dataCorrupted(context) where context.codingPath.isEmpty: return "it is not valid JSON"
        case let .dataCorrupted(context): return "\(field(context.codingPath)) has an invalid value"
        @unknown default: return "a value is invalid"
        }
    }

    /// Text the server chose, made safe to print: control characters (terminal escapes) become U+FFFD
    /// and the length is capped, so a hostile server cannot repaint the terminal or flood it.
    static func printable(_ text: String, limit: Int = 300) -> String {
        let cleaned = String(String.UnicodeScalarView(text.unicodeScalars.map { $0.properties.generalCategory == .control ? "\u{FFFD}" : $0 }))
        return cleaned.count > limit ? String(cleaned.prefix(limit)) + "…" : cleaned
    }
}
