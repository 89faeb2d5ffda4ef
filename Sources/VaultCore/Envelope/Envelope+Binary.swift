import Foundation
import VaultCrypto

/// The binary encoding of one envelope (Docs/envelope-v1.md §7.1): the header fields exactly as the
/// associated data holds them after its domain label, then `bytes nonce`, `bytes ciphertext` and `bytes
/// signature`. The header's first field, the format version `0x01`, is also what tells these bytes from
/// JSON (which starts with `{`). Because the layout is the associated data's, the version id and the
/// signed bytes are a fixed prefix followed by these very bytes (§7.1), so nothing is re-encoded to hash.
extension Envelope {
    /// The envelope in its binary encoding (§7.1). No JSON, no base64: one allocation of the exact size.
    public var binary: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(binaryCount)
        appendBinary(to: &out)
        return out
    }

    /// The length of `binary`, without building it.
    public var binaryCount: Int { header.binaryCount + 12 + AEADNonce.byteCount + ciphertext.count + Signature.byteCount }

    /// Appends the binary encoding to `out` (a frame writes its envelopes straight into its own buffer).
    func appendBinary(to out: inout [UInt8]) {
        header.appendBinary(to: &out)
        out.appendField(nonce.bytes)
        out.appendField(ciphertext)
        out.appendField(signature.bytes)
    }

    /// Decodes the binary encoding (§7.1). Throws `unsupportedVersion` for a first byte other than 1 and
    /// `malformed`, with the field and the fault in plain words, for anything else that is not exactly one
    /// envelope: a truncated field, a length past the end, a wrong fixed length, invalid UTF-8, a flag
    /// other than 0 or 1, an unknown record type, trailing bytes. The checks of §4.4 still follow: a
    /// decoded envelope is well-formed, not yet trusted.
    public init(binary: [UInt8]) throws(EnvelopeError) {
        try self.init(binary: binary, range: binary.startIndex..<binary.endIndex)
    }

    /// Decodes the envelope that fills `range` of `bytes` in place: only the ciphertext and the small
    /// fixed fields are copied out.
    init(binary bytes: [UInt8], range: Range<Int>) throws(EnvelopeError) {
        var r = BinaryReader(bytes, range)
        let header = try RecordHeader(reading: &r)
        let nonce = try r.fixed(AEADNonce.byteCount, "nonce")
        let ciphertext = try r.field("ciphertext")
        let signature = try r.fixed(Signature.byteCount, "signature")
        try r.finish("envelope")
        self.init(
            header: header,
            nonce: AEADNonce(uncheckedBytes: Array(bytes[nonce])),
            ciphertext: Array(bytes[ciphertext]),
            signature: Signature(uncheckedBytes: Array(bytes[signature]))
        )
    }
}

extension RecordHeader {
    /// Reads only the header of a binary envelope (§7.1), without touching nonce, ciphertext or signature:
    /// what a server indexes (owner, tresor, category, epoch, type, record id, HLC, deleted, author).
    public init(binaryEnvelope bytes: [UInt8]) throws(EnvelopeError) {
        var r = BinaryReader(bytes, bytes.startIndex..<bytes.endIndex)
        try self.init(reading: &r)
    }

    /// The length of the header's binary encoding: the associated data without its domain label.
    var binaryCount: Int { 123 + category.utf8.count + timestamp.deviceID.utf8.count }

    /// Appends the header fields in the order and form of the associated data (§4.1).
    func appendBinary(to out: inout [UInt8]) {
        out.append(formatVersion)
        out.appendField(ownerID)
        out.appendField(tresorID)
        out.appendField(category)
        out.appendBigEndian(epoch)
        out.append(recordType.code)
        out.appendField(recordID.bytes)
        out.appendBigEndian(timestamp.physicalMs)
        out.appendBigEndian(timestamp.counter)
        out.appendField(timestamp.deviceID)
        out.append(deleted ? 1 : 0)
        out.appendField(authorID)
    }

    /// Reads the header fields (§4.1) from `r`. Only format version 1 has this layout, so another first
    /// byte stops the reader before it guesses at the rest.
    init(reading r: inout BinaryReader) throws(EnvelopeError) {
        let version = try r.byte("format version")
        guard version != UInt8(ascii: "{") else { throw .malformed("the bytes are JSON, not the binary encoding") }
        guard version == Envelope.formatVersion else { throw .unsupportedVersion(version) }
        let owner = try r.uuid("owner id")
        let tresor = try r.uuid("tresor id")
        let category = try r.string("category")
        let epoch = try r.uint32("epoch")
        let type = try RecordType(code: try r.byte("record type"))
        let recordID = try RecordID(bytes: Array(r.bytes[try r.fixed(32, "record id")]))
        let physical = try r.uint64("clock time")
        let counter = try r.uint32("clock counter")
        let device = try r.string("device id")
        let deleted = try r.flag("deleted flag")
        let author = try r.uuid("author id")
        self.init(
            ownerID: owner,
            tresorID: tresor,
            category: category,
            epoch: epoch,
            recordType: type,
            recordID: recordID,
            timestamp: HLCTimestamp(physicalMs: physical, counter: counter, deviceID: device),
            deleted: deleted,
            authorID: author
        )
    }
}

/// Reads the fields of Docs/envelope-v1.md §1 from a range of a byte array, in place. Every failure is
/// `EnvelopeError.malformed` naming the field and the fault, in words a person can act on.
struct BinaryReader {
    let bytes: [UInt8]
    private(set) var offset: Int
    let end: Int

    init(_ bytes: [UInt8], _ range: Range<Int>) {
        self.bytes = bytes
        offset = range.lowerBound
        end = range.upperBound
    }

    /// How many bytes are left.
    var remaining: Int { end - offset }

    /// The next `n` bytes' positions; throws when fewer are left.
    mutating func take(_ n: Int, _ what: @autoclosure () -> String) throws(EnvelopeError) -> Range<Int> {
        guard n <= remaining else { throw .malformed("the bytes end inside the \(what())") }
        defer { offset += n }
        return offset..<offset + n
    }

    mutating func byte(_ what: @autoclosure () -> String) throws(EnvelopeError) -> UInt8 { bytes[try take(1, what()).lowerBound] }

    mutating func uint32(_ what: @autoclosure () -> String) throws(EnvelopeError) -> UInt32 {
        let o = try take(4, what()).lowerBound
        return UInt32(bytes[o]) << 24 | UInt32(bytes[o + 1]) << 16 | UInt32(bytes[o + 2]) << 8 | UInt32(bytes[o + 3])
    }

    mutating func uint64(_ what: @autoclosure () -> String) throws(EnvelopeError) -> UInt64 {
        let high = UInt64(try uint32(what()))
        return high << 32 | UInt64(try uint32(what()))
    }

    /// A `bool`: exactly 0 or 1.
    mutating func flag(_ what: @autoclosure () -> String) throws(EnvelopeError) -> Bool {
        switch try byte(what()) {
        case 0: return false
        case 1: return true
        case let other: throw .malformed("the \(what()) is \(other), not 0 or 1")
        }
    }

    /// A `bytes` field: its content's positions, after checking the length prefix stays inside the input.
    mutating func field(_ what: @autoclosure () -> String) throws(EnvelopeError) -> Range<Int> {
        let n = Int(try uint32("length of the \(what())"))
        guard n <= remaining else { throw .malformed("the length of the \(what()) (\(n) bytes) points past the end") }
        return try take(n, what())
    }

    /// A `bytes` field that must hold exactly `n` bytes.
    mutating func fixed(_ n: Int, _ what: @autoclosure () -> String) throws(EnvelopeError) -> Range<Int> {
        let range = try field(what())
        guard range.count == n else { throw .malformed("the \(what()) is \(range.count) bytes, not \(n)") }
        return range
    }

    /// A `string`: valid UTF-8, kept byte for byte (no normalisation), so re-encoding gives the same bytes.
    mutating func string(_ what: @autoclosure () -> String) throws(EnvelopeError) -> String {
        let range = try field(what())
        let text = bytes.withUnsafeBufferPointer { String(validUTF8: UnsafeBufferPointer(rebasing: $0[range])) }
        guard let text else { throw .malformed("the \(what()) is not valid UTF-8") }
        return text
    }

    /// A `uuid`: a `bytes` field of exactly 16 bytes.
    mutating func uuid(_ what: @autoclosure () -> String) throws(EnvelopeError) -> UUID {
        let o = try fixed(16, what()).lowerBound
        let b = bytes
        return UUID(
            uuid: (
                b[o], b[o + 1], b[o + 2], b[o + 3], b[o + 4], b[o + 5], b[o + 6], b[o + 7],
                b[o + 8], b[o + 9], b[o + 10], b[o + 11], b[o + 12], b[o + 13], b[o + 14], b[o + 15]
            )
        )
    }

    /// Throws unless every byte was read: trailing bytes are an error, never ignored.
    func finish(_ what: @autoclosure () -> String) throws(EnvelopeError) {
        guard remaining == 0 else { throw .malformed("\(remaining) bytes follow the end of the \(what())") }
    }
}

extension [UInt8] {
    /// Appends a big-endian `u32`.
    mutating func appendBigEndian(_ v: UInt32) {
        Swift.withUnsafeBytes(of: v.bigEndian) { append(contentsOf: $0) }
    }

    /// Appends a big-endian `u64`.
    mutating func appendBigEndian(_ v: UInt64) {
        Swift.withUnsafeBytes(of: v.bigEndian) { append(contentsOf: $0) }
    }

    /// Appends a `bytes` field: a `u32` length, then the bytes.
    mutating func appendField(_ field: [UInt8]) {
        appendBigEndian(UInt32(field.count))
        append(contentsOf: field)
    }

    /// Appends a `string` field.
    mutating func appendField(_ text: String) {
        appendBigEndian(UInt32(text.utf8.count))
        append(contentsOf: text.utf8)
    }

    /// Appends a `uuid` field.
    mutating func appendField(_ id: UUID) {
        appendBigEndian(UInt32(16))
        Swift.withUnsafeBytes(of: id.uuid) { append(contentsOf: $0) }
    }
}
