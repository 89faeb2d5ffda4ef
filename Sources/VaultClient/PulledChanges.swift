import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// Why a pulled record was kept aside instead of applied (Docs/design.md §5): the check of
/// Docs/envelope-v1.md §4.4 it failed, or the sync rule it broke.
public enum QuarantineReason: String, Sendable, Codable, CaseIterable, Comparable {
    /// The envelope does not parse, or a header field is outside its domain (§4.4 step 1).
    case malformed
    /// A format version this code does not read.
    case unsupportedVersion
    /// The header names another owner, tresor or category (step 2), or a tresor this account does not have.
    case wrongContext
    /// The author is not the owner (step 2).
    case authorNotOwner
    /// The author's signature does not verify (step 3).
    case invalidSignature
    /// The reader holds no key of the named epoch (step 4).
    case missingEpochKey
    /// The AEAD refused the ciphertext (step 5).
    case decryptionFailed
    /// The padding is not a bucket (step 6).
    case invalidPadding
    /// The payload is not a valid record (step 6).
    case malformedPayload
    /// The payload contradicts its header (step 6).
    case payloadMismatch
    /// An older version of a record than the server showed before.
    case replayed
    /// A clock too far in the future to accept.
    case clockOutOfRange

    /// The reason of an envelope check that failed.
    init(_ error: EnvelopeError) {
        switch error {
        case .unsupportedVersion: self = .unsupportedVersion
        case .malformed: self = .malformed
        case .wrongContext: self = .wrongContext
        case .authorNotOwner: self = .authorNotOwner
        case .invalidSignature: self = .invalidSignature
        case .missingEpochKey: self = .missingEpochKey
        case .decryptionFailed: self = .decryptionFailed
        case .invalidPadding: self = .invalidPadding
        case .malformedPayload: self = .malformedPayload
        case .payloadMismatch: self = .payloadMismatch
        }
    }

    /// Orders reasons by name, for stable messages.
    public static func < (a: QuarantineReason, b: QuarantineReason) -> Bool { a.rawValue < b.rawValue }
}

/// A record the server sent that failed its integrity check: kept aside with where it was in the
/// change sequence, never applied, and fetched again by the next sync (Docs/design.md §5).
public struct QuarantinedRecord: Sendable, Equatable, Codable {
    /// The change sequence the server delivered it at.
    public var sequence: UInt64
    /// The record id (hex), when the envelope named a well-formed one.
    public var recordID: String?
    /// The version id, when the envelope parsed.
    public var versionID: String?
    /// Why it was not applied.
    public var reason: QuarantineReason

    /// A quarantined record.
    public init(sequence: UInt64, recordID: String?, versionID: String?, reason: QuarantineReason) {
        self.sequence = sequence
        self.recordID = recordID
        self.versionID = versionID
        self.reason = reason
    }

    /// "invalidSignature ×2, malformed ×1": the reasons of `records` with their counts, most frequent first.
    public static func reasons(_ records: [QuarantinedRecord]) -> String {
        var counts: [QuarantineReason: Int] = [:]
        for r in records { counts[r.reason, default: 0] += 1 }
        let ordered = counts.sorted { (a: (key: QuarantineReason, value: Int), b: (key: QuarantineReason, value: Int)) -> Bool in
            a.value != b.value ? a.value > b.value : a.key < b.key
        }
        return ordered.map { "\($0.key.rawValue) ×\($0.value)" }.joined(separator: ", ")
    }

    /// The message that names how many of `records` failed and why, or nil when there are none.
    /// `subject` says whose records they are, `notDone` what was not done with them, `hint` where to look.
    static func message(_ records: [QuarantinedRecord], subject: String, notDone: String, hint: String) -> String? {
        guard !records.isEmpty else { return nil }
        let one = records.count == 1
        return "\(records.count) \(one ? "record" : "records") \(subject) failed \(one ? "its" : "their") integrity check and "
            + "\(one ? "was" : "were") not \(notDone): \(reasons(records))\(hint)"
    }
}

/// A record that failed a check of its own: it goes into quarantine, the rest of its page goes on.
struct QuarantineError: Error {
    var reason: QuarantineReason
}

/// One change of a pull page, its envelope decoded on its own: a change whose envelope does not parse
/// is still a change (with its sequence), so one damaged envelope cannot make the page unreadable.
struct PulledChange: Sendable {
    var sequence: UInt64
    /// The envelope, or nil when it did not parse.
    var envelope: Envelope?
    /// The record id the envelope names, when it is well-formed (also when the rest did not parse).
    var recordID: String?

    /// A change whose envelope parsed.
    init(sequence: UInt64, envelope: Envelope) {
        self.sequence = sequence
        self.envelope = envelope
        recordID = envelope.header.recordID.hex
    }

    /// The quarantine entry of this change for `reason`.
    func quarantined(_ reason: QuarantineReason) -> QuarantinedRecord {
        QuarantinedRecord(sequence: sequence, recordID: recordID, versionID: envelope?.versionID, reason: reason)
    }
}

/// A page of `GET /v1/records` (a page frame, `PulledPage+Binary`), read as a list of changes before any
/// envelope is decoded.
struct PulledPage: Sendable {
    var changes: [PulledChange]
    var nextCursor: UInt64
    var done: Bool
}
