/// A batch of envelopes in the binary encoding (Docs/envelope-v1.md §7.2): `"CVF" 0x01 || u32 count ||
/// count × bytes envelope || u32 n || n × commitment`, at most `maxCount` envelopes, `maxCommitments`
/// state commitments and `maxBytes` bytes. Reading checks the framing
/// once and keeps only where each envelope lies in the input; envelopes are then decoded in place, one by
/// one or all at once, so a batch is never copied whole a second time.
public struct EnvelopeFrame: Sendable {
    /// The 4-byte marker that opens a batch: "CVF" and the frame version 1.
    public static let magic: [UInt8] = [0x43, 0x56, 0x46, 0x01]
    /// The most envelopes in one batch (one push).
    public static let maxCount = 2_000
    /// The largest batch, in bytes (32 MiB, the server's body limit).
    public static let maxBytes = 32 * 1024 * 1024
    /// The most state commitments a batch or a page carries (one per tresor).
    public static let maxCommitments = 2_000

    /// The whole batch as received.
    public let bytes: [UInt8]
    /// Where each envelope's binary encoding lies in `bytes`.
    private let ranges: [Range<Int>]
    /// The patient's commitment to each tresor the batch changes (Docs/envelope-v1.md §3.4), signatures
    /// not yet checked.
    public let commitments: [StateCommitment]

    /// How many envelopes the batch holds.
    public var count: Int { ranges.count }

    /// Checks the framing of `bytes`: the marker, the count (at most `maxCount`), every length prefix
    /// inside the body, exactly `count` envelopes, well-formed commitments and no trailing bytes. The envelopes themselves are
    /// decoded later (`envelopes()`, `envelope(at:)`), so a bad one can be named by its index.
    public init(bytes: [UInt8], maxCount: Int = EnvelopeFrame.maxCount) throws(EnvelopeFrameError) {
        guard bytes.count <= Self.maxBytes else { throw .tooLarge("\(bytes.count) bytes; at most \(Self.maxBytes) are allowed") }
        var r = BinaryReader(bytes, bytes.startIndex..<bytes.endIndex)
        try r.expectMagic(Self.magic, "a batch of envelopes")
        let count = Int(try framed { () throws(EnvelopeError) in try r.uint32("envelope count") })
        guard count <= maxCount else { throw .tooLarge("it announces \(count) envelopes; at most \(maxCount) are allowed") }
        // Every envelope takes at least its 4-byte length (and the commitment count follows), so a count
        // the body cannot hold is refused before anything is reserved for it.
        guard count <= max(0, r.remaining - 4) / 4 else {
            throw .malformed("it announces \(count) envelopes but holds only \(r.remaining) more bytes")
        }
        var ranges: [Range<Int>] = []
        ranges.reserveCapacity(count)
        for i in 0..<count {
            guard r.remaining > 0 else { throw .malformed("it ends after \(i) of the \(count) envelopes it announces") }
            ranges.append(try framed { () throws(EnvelopeError) in try r.field("envelope \(i)") })
        }
        guard r.remaining > 0 else { throw .malformed("it ends after its \(count) envelopes, without the count of state commitments") }
        let commitments = try r.commitments(max: Self.maxCommitments)
        guard r.remaining == 0 else { throw .malformed("\(r.remaining) bytes follow the end of the batch") }
        self.bytes = bytes
        self.ranges = ranges
        self.commitments = commitments
    }

    /// Decodes the envelope at `index` (counting from 0) in place.
    public func envelope(at index: Int) throws(EnvelopeError) -> Envelope {
        try Envelope(binary: bytes, range: ranges[index])
    }

    /// Reads only the header of the envelope at `index`: what a server indexes, without the ciphertext.
    public func header(at index: Int) throws(EnvelopeError) -> RecordHeader {
        var r = BinaryReader(bytes, ranges[index])
        return try RecordHeader(reading: &r)
    }

    /// The binary encoding of the envelope at `index`, as received (what a server stores unchanged).
    public func envelopeBytes(at index: Int) -> ArraySlice<UInt8> { bytes[ranges[index]] }

    /// Decodes every envelope; the first that is not well-formed is reported with its index and why.
    public func envelopes() throws(EnvelopeFrameError) -> [Envelope] {
        var out: [Envelope] = []
        out.reserveCapacity(ranges.count)
        for (i, range) in ranges.enumerated() {
            do { out.append(try Envelope(binary: bytes, range: range)) } catch { throw .badEnvelope(index: i, reason: error) }
        }
        return out
    }

    /// Encodes `envelopes` and `commitments` as one batch; refuses more than `maxCount` envelopes,
    /// `maxCommitments` commitments or `maxBytes` bytes, so a writer never sends what every reader must reject.
    public static func encode(_ envelopes: [Envelope], commitments: [StateCommitment] = []) throws(EnvelopeFrameError) -> [UInt8] {
        let total = envelopes.reduce(12) { $0 + 4 + $1.binaryCount } + commitments.reduce(0) { $0 + $1.binaryCount }
        var out = try start(count: envelopes.count, commitments: commitments.count, total: total)
        for e in envelopes {
            out.appendBigEndian(UInt32(e.binaryCount))
            e.appendBinary(to: &out)
        }
        out.appendCommitments(commitments)
        return out
    }

    /// Encodes envelopes already in their binary encoding (as a device or a server stores them) as one batch.
    public static func encode(binaries: [[UInt8]], commitments: [StateCommitment] = []) throws(EnvelopeFrameError) -> [UInt8] {
        let total = binaries.reduce(12) { $0 + 4 + $1.count } + commitments.reduce(0) { $0 + $1.binaryCount }
        var out = try start(count: binaries.count, commitments: commitments.count, total: total)
        for b in binaries { out.appendField(b) }
        out.appendCommitments(commitments)
        return out
    }

    /// The marker and count of a batch of `count` envelopes and `total` bytes, in a buffer of that size.
    private static func start(count: Int, commitments: Int, total: Int) throws(EnvelopeFrameError) -> [UInt8] {
        guard count <= maxCount else { throw .tooLarge("\(count) envelopes; at most \(maxCount) are allowed") }
        guard commitments <= maxCommitments else { throw .tooLarge("\(commitments) state commitments; at most \(maxCommitments) are allowed") }
        guard total <= maxBytes else { throw .tooLarge("\(total) bytes; at most \(maxBytes) are allowed") }
        var out: [UInt8] = []
        out.reserveCapacity(total)
        out.append(contentsOf: magic)
        out.appendBigEndian(UInt32(count))
        return out
    }
}
