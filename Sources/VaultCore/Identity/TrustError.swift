import Foundation

/// Why a certificate, approval, grant or key bundle was not trusted. Each case says which check failed.
public enum TrustError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A signature did not verify; `what` names the statement ("certificate", "approval", "grant").
    case invalidSignature(what: String)
    /// A statement names another user, role, share, tresor or category than the one expected.
    case mismatch(what: String, field: String)
    /// A certificate carries a role other than the one required.
    case wrongRole(expected: Role, actual: Role)
    /// The hash inside a statement does not match what it claims to cover.
    case hashMismatch(what: String)
    /// A statement could not be decoded.
    case malformed(what: String, reason: String)
    /// A statement's validity has ended.
    case expired(what: String)
    /// The key bundle did not open: wrong password (or a bundle altered on the server).
    case wrongPassword
    /// A username that is not acceptable.
    case invalidUsername(String)
    /// A statement version this client does not understand.
    case unsupportedVersion(what: String, version: UInt8)

    public var description: String {
        switch self {
        case let .invalidSignature(what): return "\(what) signature is not valid"
        case let .mismatch(what, field): return "\(what) names a different \(field)"
        case let .wrongRole(expected, actual): return "certificate role is \(actual.rawValue), expected \(expected.rawValue)"
        case let .hashMismatch(what): return "\(what) hash does not match its contents"
        case let .malformed(what, reason): return "\(what) is malformed: \(reason)"
        case let .expired(what): return "\(what) has expired"
        case .wrongPassword: return "wrong password"
        case let .invalidUsername(name): return "invalid username '\(name)': use 3-32 characters of a-z, 0-9, '.', '_', '-'"
        case let .unsupportedVersion(what, version): return "\(what) version \(version) is not supported"
        }
    }
}
