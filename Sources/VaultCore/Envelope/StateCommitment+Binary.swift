import Foundation
import VaultCrypto

/// The binary form of a state commitment (Docs/envelope-v1.md §3.4): `bytes statement || bytes signature`,
/// where the statement is exactly the canonical bytes the patient signed. A reader parses the statement
/// field by field and refuses anything that would not re-encode to the same bytes, so what it verifies is
/// what it was sent.
extension StateCommitment {
    /// The length of `binary`, without building it.
    public var binaryCount: Int { 8 + statementBytes.count + Signature.byteCount }

    /// `bytes statement || bytes signature` (§3.4).
    public var binary: [UInt8] {
        var out: [UInt8] = []
        appendBinary(to: &out)
        return out
    }

    /// Appends the binary form to `out` (a frame writes its commitments straight into its own buffer).
    public func appendBinary(to out: inout [UInt8]) {
        out.appendField(statementBytes)
        out.appendField(signature.bytes)
    }

    /// Decodes the binary form (§3.4) that fills `bytes`.
    public init(binary bytes: [UInt8]) throws(EnvelopeError) {
        var r = BinaryReader(bytes, bytes.startIndex..<bytes.endIndex)
        try self.init(reading: &r)
        try r.finish("state commitment")
    }

    /// Reads one commitment from `r`: a statement with the label and version 1, every field in place, no
    /// trailing bytes inside it, then a 64-byte signature. The signature is not checked here.
    init(reading r: inout BinaryReader) throws(EnvelopeError) {
        let range = try r.field("state commitment statement")
        var s = BinaryReader(r.bytes, range)
        guard try s.string("statement label") == Self.domain else { throw .malformed("the statement is not a state commitment") }
        let version = try s.byte("statement version")
        guard version == 1 else { throw .malformed("state commitment version \(version) is not supported") }
        let owner = try s.uuid("owner id")
        let tresor = try s.uuid("tresor id")
        let category = try s.string("category")
        let sequence = try s.uint64("commitment sequence")
        let physical = try s.uint64("clock time")
        let counter = try s.uint32("clock counter")
        let device = try s.string("device id")
        let live = try s.uint64("live count")
        let deleted = try s.uint64("deleted count")
        let topEpoch = try s.uint32("top epoch")
        let tresorVersion = try s.uint64("tresor version")
        let digest = try s.fixed(32, "digest")
        let committedAt = try s.uint64("commitment time")
        try s.finish("state commitment statement")
        let signature = try r.fixed(Signature.byteCount, "state commitment signature")
        self.init(
            ownerID: owner,
            tresorID: tresor,
            category: category,
            sequence: sequence,
            newest: HLCTimestamp(physicalMs: physical, counter: counter, deviceID: device),
            live: live,
            deleted: deleted,
            topEpoch: topEpoch,
            tresorVersion: tresorVersion,
            digest: Hex.encode(Array(r.bytes[digest])),
            committedAt: UnixMillis(bitPattern: committedAt),
            signature: Signature(uncheckedBytes: Array(r.bytes[signature]))
        )
    }
}

extension BinaryReader {
    /// `u32 n || n × commitment` (Docs/envelope-v1.md §7.2, §7.3), at most `max`.
    mutating func commitments(max: Int) throws(EnvelopeFrameError) -> [StateCommitment] {
        let n = Int(try framed { () throws(EnvelopeError) in try uint32("commitment count") })
        guard n <= max else { throw .tooLarge("it announces \(n) state commitments; at most \(max) are allowed") }
        // Each takes at least its two length prefixes: a count the body cannot hold reserves nothing.
        guard n <= remaining / 8 else { throw .malformed("it announces \(n) state commitments but holds only \(remaining) more bytes") }
        var out: [StateCommitment] = []
        out.reserveCapacity(n)
        for i in 0..<n {
            do { out.append(try StateCommitment(reading: &self)) } catch {
                guard case let .malformed(why) = error else { throw .malformed("state commitment \(i): \(error)") }
                throw .malformed("state commitment \(i): \(why)")
            }
        }
        return out
    }
}

extension [UInt8] {
    /// Appends `u32 n || n × commitment`.
    mutating func appendCommitments(_ commitments: [StateCommitment]) {
        appendBigEndian(UInt32(commitments.count))
        for c in commitments { c.appendBinary(to: &self) }
    }
}
