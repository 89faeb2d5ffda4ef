/// Why a binary batch of envelopes or a binary pull page was rejected (Docs/envelope-v1.md §7.2-§7.3).
/// Every case is an integrity failure of the whole body, except that a pull page reports a bad envelope
/// per change instead (one quarantined change, never a broken page).
public enum EnvelopeFrameError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The framing itself is broken: wrong marker, a truncated field, a length past the end, a count the
    /// body does not hold, trailing bytes, changes out of order.
    case malformed(String)
    /// More envelopes or more bytes than the format allows.
    case tooLarge(String)
    /// The framing is sound but the envelope at `index` (counting from 0) is not a well-formed envelope.
    case badEnvelope(index: Int, reason: EnvelopeError)

    public var description: String {
        switch self {
        case let .malformed(why): return "the batch of envelopes is malformed: \(why)"
        case let .tooLarge(why): return "the batch of envelopes is too large: \(why)"
        case let .badEnvelope(index, reason): return "envelope \(index) of the batch (counting from 0): \(reason)"
        }
    }
}

extension BinaryReader {
    /// Checks the 4-byte marker that opens a frame or a page, so that a body that is JSON (`{`) or
    /// anything else is told apart before any length in it is trusted.
    mutating func expectMagic(_ magic: [UInt8], _ what: String) throws(EnvelopeFrameError) {
        guard remaining >= magic.count, bytes[offset..<offset + magic.count].elementsEqual(magic) else {
            let json = remaining > 0 && (bytes[offset] == UInt8(ascii: "{") || bytes[offset] == UInt8(ascii: "["))
            throw .malformed("it does not start with the marker of \(what)\(json ? " (it looks like JSON)" : "")")
        }
        _ = try? take(magic.count, "marker")
    }
}

/// Runs reads of the framing, reporting a failure as a framing failure with the same plain reason.
func framed<T>(_ read: () throws(EnvelopeError) -> T) throws(EnvelopeFrameError) -> T {
    do { return try read() } catch {
        guard case let .malformed(why) = error else { throw .malformed(error.description) }
        throw .malformed(why)
    }
}
