import Foundation
import VaultCrypto

/// A decrypted record: an activity or an outcome (the payload of an envelope, Docs/envelope-v1.md §4.2).
public enum CareRecord: Sendable, Hashable {
    case activity(Activity)
    case outcome(Outcome)

    /// The record type that goes into the header.
    public var type: RecordType {
        switch self {
        case .activity: return .activity
        case .outcome: return .outcome
        }
    }

    /// The stable record id of this record under `key` (the owner's record-id key, §5).
    public func recordID(key: SymmetricKey) -> RecordID {
        switch self {
        case let .activity(a): return RecordID.make(type: .activity, activityID: a.id, occurrence: nil, key: key)
        case let .outcome(o): return RecordID.make(type: .outcome, activityID: o.activityID, occurrence: o.occurrence, key: key)
        }
    }
}

/// The JSON shape of a payload (§4.2): `{"type": …, "activity"|"outcome": …}`; a tombstone has only the type.
struct RecordPayload: Codable, Equatable {
    var type: RecordType
    var activity: Activity?
    var outcome: Outcome?

    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        e.dateEncodingStrategy = .millisecondsSince1970
        return e
    }()

    /// The payload in `bytes`: read directly when `PayloadParser` follows them, which gives what
    /// `JSONDecoder` would, else by `JSONDecoder`.
    static func decode(_ bytes: [UInt8]) throws(EnvelopeError) -> RecordPayload {
        if let payload = PayloadParser.decode(bytes) { return payload }
        return try decodeWithFoundation(bytes)
    }

    /// The payload as Foundation's `JSONDecoder` reads it: the reference `PayloadParser` is checked against.
    static func decodeWithFoundation(_ bytes: [UInt8]) throws(EnvelopeError) -> RecordPayload {
        let d = JSONDecoder()
        d.dateDecodingStrategy = .millisecondsSince1970
        do { return try d.decode(RecordPayload.self, from: Data(bytes)) } catch { throw .malformedPayload("not a record: \(Swift.type(of: error))") }
    }
}

/// An opened envelope: its header and, unless it is a tombstone, its record.
public struct OpenedRecord: Sendable, Hashable {
    public var header: RecordHeader
    /// Nil for a tombstone.
    public var record: CareRecord?
}

extension Envelope {
    /// Serialises `record` (or a tombstone of `type` when `record` is nil) and seals it.
    public static func seal(
        record: CareRecord?,
        type: RecordType,
        header: RecordHeader,
        key: SymmetricKey,
        author: SigningKeyPair
    ) throws(EnvelopeError) -> Envelope {
        var payload = RecordPayload(type: type)
        switch record {
        case let .activity(a)?: payload.activity = a
        case let .outcome(o)?: payload.outcome = o
        case nil: break
        }
        guard header.recordType == type, header.deleted == (record == nil), record.map({ $0.type == type }) ?? true else {
            throw .payloadMismatch("header and record disagree")
        }
        let bytes: [UInt8]
        do { bytes = Array(try RecordPayload.encoder.encode(payload)) } catch { throw .malformedPayload("cannot encode") }
        return try seal(payload: bytes, header: header, key: key, author: author)
    }

    /// Runs every check of §4.4 and returns the record. `keys` are the tresor's epoch keys the reader holds.
    public func openRecord(
        keys: [UInt32: SymmetricKey],
        authorKey: SigningPublicKey,
        expecting context: EnvelopeContext
    ) throws(EnvelopeError) -> OpenedRecord {
        try record(from: open(keys: keys, authorKey: authorKey, expecting: context))
    }

    /// Every check of §4.4 but the author's signature, for an envelope whose signature this reader
    /// verified before keeping it in storage that only this reader writes (the doctor's cache), or whose
    /// version id a state commitment the reader verified covers (Docs/commitment-pages.md). The
    /// AEAD still authenticates the header and ciphertext under the epoch key, so a changed byte, or a
    /// record moved to another id, owner, tresor or epoch, still fails (`decryptionFailed`).
    public func openRecordVerifiedEarlier(keys: [UInt32: SymmetricKey], expecting context: EnvelopeContext) throws(EnvelopeError) -> OpenedRecord {
        try checkStructure(expecting: context)
        guard let key = keys[header.epoch] else { throw .missingEpochKey(header.epoch) }
        return try record(from: decrypt(key: key))
    }

    /// §4.4 step 6 and 7: the payload parsed and checked against the header.
    private func record(from bytes: [UInt8]) throws(EnvelopeError) -> OpenedRecord {
        let payload = try RecordPayload.decode(bytes)
        guard payload.type == header.recordType else { throw .payloadMismatch("record type") }
        let record: CareRecord?
        switch (payload.activity, payload.outcome) {
        case (nil, nil): record = nil
        case let (a?, nil): record = .activity(a)
        case let (nil, o?): record = .outcome(o)
        default: throw .payloadMismatch("both an activity and an outcome")
        }
        guard header.deleted == (record == nil) else {
            throw .payloadMismatch(header.deleted ? "tombstone with a body" : "live record without a body")
        }
        if let record, record.type != header.recordType { throw .payloadMismatch("record type") }
        if case let .activity(a)? = record, a.category != header.category { throw .payloadMismatch("category") }
        // A valid signature proves who wrote the record, not that the writer's tool checked it: values
        // no tool should have accepted (an occurrence past the limit, a zero schedule step) are refused
        // here, before any reader computes with them.
        do {
            switch record {
            case let .activity(a)?: try a.validate()
            case let .outcome(o)?: try o.validate()
            case nil: break
            }
        } catch { throw .malformedPayload("\(error)") }
        return OpenedRecord(header: header, record: record)
    }
}
