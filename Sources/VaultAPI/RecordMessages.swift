import Foundation
import VaultCore
import VaultCrypto

// MARK: Records

/// What happened to one pushed envelope.
public struct PushResult: Codable, Sendable, Equatable {
    public enum Status: String, Codable, Sendable {
        /// Stored as a new version (and, if it wins, the record's new head).
        case stored
        /// This exact version was already stored: nothing changed.
        case duplicate
        /// Refused; `code` and `reason` say why.
        case rejected
    }

    public var versionID: String
    public var status: Status
    /// The change sequence the version got when it became the head.
    public var sequence: UInt64?
    public var code: APIErrorCode?
    public var reason: String?
    public init(versionID: String, status: Status, sequence: UInt64? = nil, code: APIErrorCode? = nil, reason: String? = nil) {
        self.versionID = versionID
        self.status = status
        self.sequence = sequence
        self.code = code
        self.reason = reason
    }
}

/// A result per pushed envelope, in request order.
public struct PushResponse: Codable, Sendable {
    public var results: [PushResult]
    public init(results: [PushResult]) { self.results = results }
}
