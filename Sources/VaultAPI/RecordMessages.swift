import Foundation
import VaultCore
import VaultCrypto

// MARK: Records

/// A batch of envelopes to store.
public struct PushRequest: Codable, Sendable {
    public var envelopes: [Envelope]
    /// The patient's commitment to each changed tresor's state after this batch (Docs/envelope-v1.md §3.4),
    /// each at the stored sequence + 1; the server refuses the whole push (409) when one is stale. Absent
    /// from older clients, whose pushes are still accepted.
    public var commitments: [StateCommitment]?
    public init(envelopes: [Envelope], commitments: [StateCommitment]? = nil) {
        self.envelopes = envelopes
        self.commitments = commitments
    }
}

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

/// One change: a record's head at a point of the owner's change sequence.
public struct Change: Codable, Sendable {
    public var sequence: UInt64
    public var envelope: Envelope
    public init(sequence: UInt64, envelope: Envelope) {
        self.sequence = sequence
        self.envelope = envelope
    }
}

/// A page of changes after a cursor.
public struct PullResponse: Codable, Sendable {
    public var changes: [Change]
    /// Pass this as `since` to get the next page.
    public var nextCursor: UInt64
    /// True when there is nothing after `nextCursor` yet.
    public var done: Bool
    /// On the final page (`done`), the newest state commitment of each tresor the pull covers, read in
    /// the same snapshot as the page (Docs/envelope-v1.md §3.4).
    public var commitments: [StateCommitment]?
    public init(changes: [Change], nextCursor: UInt64, done: Bool, commitments: [StateCommitment]? = nil) {
        self.changes = changes
        self.nextCursor = nextCursor
        self.done = done
        self.commitments = commitments
    }
}
