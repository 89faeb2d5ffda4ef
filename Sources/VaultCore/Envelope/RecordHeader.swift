import Foundation
import VaultCrypto

/// The kinds of record an envelope can carry (Docs/envelope-v1.md §4.1).
public enum RecordType: String, Codable, Sendable, CaseIterable {
    case activity
    case outcome

    /// The byte that stands for this type in the associated data.
    public var code: UInt8 { self == .activity ? 1 : 2 }

    init(code: UInt8) throws(EnvelopeError) {
        switch code {
        case 1: self = .activity
        case 2: self = .outcome
        default: throw .malformed("record type \(code)")
        }
    }
}

/// A stable record id: BLAKE2b-256 of the natural key, keyed with the owner's record-id key
/// (Docs/envelope-v1.md §5). Hex on the wire.
public struct RecordID: Hashable, Sendable, Comparable, Codable, CustomStringConvertible {
    /// The 32 id bytes.
    public let bytes: [UInt8]

    /// Wraps id bytes, which must be 32.
    public init(bytes: [UInt8]) throws(EnvelopeError) {
        guard bytes.count == 32 else { throw .malformed("record id must be 32 bytes, got \(bytes.count)") }
        self.bytes = bytes
    }

    /// Parses the 64-character hex form.
    public init(hex: String) throws(EnvelopeError) {
        guard let raw = try? Hex.decode(hex) else { throw .malformed("record id is not hex") }
        try self.init(bytes: raw)
    }

    /// The id of the record whose natural key is (`type`, `activityID`, `occurrence`).
    public static func make(type: RecordType, activityID: String, occurrence: Int?, key: SymmetricKey) -> RecordID {
        var w = CanonicalWriter(domain: "CareVault-record-id-v1")
        w.append(type.code)
        w.append(activityID)
        w.append(occurrence.map { Int64($0) })
        return try! RecordID(bytes: BLAKE2b.hash(w.bytes, key: key))
    }

    public var hex: String { Hex.encode(bytes) }
    public var description: String { hex }
    public static func < (a: RecordID, b: RecordID) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        do { try self.init(hex: try c.decode(String.self)) } catch let e as EnvelopeError {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: e.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(hex)
    }
}

/// The envelope fields the server can see, all bound by the associated data (Docs/envelope-v1.md §4.1).
public struct RecordHeader: Codable, Sendable, Hashable {
    public var formatVersion: UInt8
    public var ownerID: UUID
    public var tresorID: UUID
    public var category: String
    public var epoch: UInt32
    public var recordType: RecordType
    public var recordID: RecordID
    public var timestamp: HLCTimestamp
    public var deleted: Bool
    public var authorID: UUID

    /// A v1 header.
    public init(
        ownerID: UUID,
        tresorID: UUID,
        category: String,
        epoch: UInt32,
        recordType: RecordType,
        recordID: RecordID,
        timestamp: HLCTimestamp,
        deleted: Bool,
        authorID: UUID
    ) {
        self.formatVersion = Envelope.formatVersion
        self.ownerID = ownerID
        self.tresorID = tresorID
        self.category = category
        self.epoch = epoch
        self.recordType = recordType
        self.recordID = recordID
        self.timestamp = timestamp
        self.deleted = deleted
        self.authorID = authorID
    }

    /// The canonical associated data (§4.1): every field, in order, after the domain label. The fields
    /// are written by `appendBinary`, so the binary encoding (Docs/envelope-v1.md §7.1) cannot drift from it.
    public func associatedData() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(25 + binaryCount)
        out.appendField("CareVault-envelope-v1")
        appendBinary(to: &out)
        return out
    }

    /// §4.4 step 1 and the author rule of step 2: what can be checked without keys.
    public func validateStructure() throws(EnvelopeError) {
        guard formatVersion == Envelope.formatVersion else { throw .unsupportedVersion(formatVersion) }
        guard epoch >= 1 else { throw .malformed("epoch 0") }
        guard !category.isEmpty, category.utf8.count <= 64 else { throw .malformed("category length") }
        guard !timestamp.deviceID.isEmpty, timestamp.deviceID.utf8.count <= 64 else { throw .malformed("device id length") }
        guard authorID == ownerID else { throw .authorNotOwner }
    }
}
