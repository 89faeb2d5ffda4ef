import Foundation
import VaultCrypto

/// The canonical, length-prefixed binary encoding every signed or authenticated statement uses
/// (Docs/envelope-v1.md §2). Not JSON: JSON has many spellings of one value, and a signature must cover
/// exactly one. Every statement starts with a domain-separation label, so a signature over one kind of
/// statement can never be replayed as another.
///
/// Encoding rules: an unsigned integer is fixed-width big-endian; a byte string or UTF-8 string is a
/// 4-byte big-endian length followed by its bytes; a boolean is one byte 0 or 1; an optional is a
/// presence byte (0 or 1) followed by the value when present.
public struct CanonicalWriter: Sendable {
    /// The bytes written so far.
    public private(set) var bytes: [UInt8] = []

    /// Starts a statement with its domain-separation label.
    public init(domain: String) {
        self.init(domain: domain, capacity: 256)
    }

    /// Starts a statement, reserving room for about `capacity` bytes (large statements are then written
    /// without reallocating).
    public init(domain: String, capacity: Int) {
        bytes.reserveCapacity(max(capacity, domain.utf8.count + 4))
        append(domain)
    }

    /// Appends one byte.
    public mutating func append(_ value: UInt8) { bytes.append(value) }
    /// Appends a 32-bit big-endian integer.
    public mutating func append(_ value: UInt32) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    /// Appends a 64-bit big-endian integer.
    public mutating func append(_ value: UInt64) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
    /// Appends a 64-bit signed integer as its two's-complement bit pattern.
    public mutating func append(_ value: Int64) { append(UInt64(bitPattern: value)) }
    /// Appends a boolean as one byte.
    public mutating func append(_ value: Bool) { bytes.append(value ? 1 : 0) }
    /// Appends a length-prefixed byte string.
    public mutating func append(_ value: [UInt8]) {
        append(UInt32(value.count))
        bytes.append(contentsOf: value)
    }
    /// Appends a length-prefixed UTF-8 string.
    public mutating func append(_ value: String) { append(Array(value.utf8)) }
    /// Appends an optional string with a presence byte.
    public mutating func append(_ value: String?) {
        if let value {
            append(true)
            append(value)
        } else {
            append(false)
        }
    }
    /// Appends an optional 64-bit integer with a presence byte.
    public mutating func append(_ value: Int64?) {
        if let value {
            append(true)
            append(value)
        } else {
            append(false)
        }
    }
    /// Appends a fixed-size public value (key, nonce, signature) length-prefixed.
    public mutating func append<T: FixedSizeBytes>(_ value: T) { append(value.bytes) }
    /// Appends a UUID as its 16 raw bytes, length-prefixed.
    public mutating func append(_ value: UUID) {
        let u = value.uuid
        append([u.0, u.1, u.2, u.3, u.4, u.5, u.6, u.7, u.8, u.9, u.10, u.11, u.12, u.13, u.14, u.15])
    }
    /// Overwrites the bytes written so far, for statements that held key material.
    public mutating func wipe() { Memory.zero(&bytes) }
}

/// Reads what `CanonicalWriter` wrote, rejecting truncation and trailing bytes.
public struct CanonicalReader: Sendable {
    private let bytes: [UInt8]
    private var offset = 0

    /// Starts reading `bytes`, which must begin with `domain`.
    public init(_ bytes: [UInt8], domain: String) throws(EncodingError) {
        self.bytes = bytes
        let label = try readString()
        guard label == domain else { throw EncodingError.wrongDomain(expected: domain, found: label) }
    }

    private mutating func take(_ n: Int) throws(EncodingError) -> ArraySlice<UInt8> {
        guard n >= 0, bytes.count - offset >= n else { throw .truncated }
        defer { offset += n }
        return bytes[offset..<offset + n]
    }

    /// Reads one byte.
    public mutating func readUInt8() throws(EncodingError) -> UInt8 { try take(1).first! }
    /// Reads a 32-bit big-endian integer.
    public mutating func readUInt32() throws(EncodingError) -> UInt32 { try take(4).reduce(0) { $0 << 8 | UInt32($1) } }
    /// Reads a 64-bit big-endian integer.
    public mutating func readUInt64() throws(EncodingError) -> UInt64 { try take(8).reduce(0) { $0 << 8 | UInt64($1) } }
    /// Reads a 64-bit signed integer.
    public mutating func readInt64() throws(EncodingError) -> Int64 { Int64(bitPattern: try readUInt64()) }
    /// Reads a boolean; any byte other than 0 or 1 is rejected.
    public mutating func readBool() throws(EncodingError) -> Bool {
        switch try readUInt8() {
        case 0: return false
        case 1: return true
        default: throw .invalidValue("boolean")
        }
    }
    /// Reads a length-prefixed byte string.
    public mutating func readBytes() throws(EncodingError) -> [UInt8] { Array(try take(Int(try readUInt32()))) }
    /// Reads a length-prefixed UTF-8 string; invalid UTF-8 is rejected.
    public mutating func readString() throws(EncodingError) -> String {
        let raw = try readBytes()
        guard let s = raw.withUnsafeBufferPointer(String.init(validUTF8:)) else { throw .invalidValue("UTF-8 string") }
        return s
    }
    /// Reads an optional string.
    public mutating func readOptionalString() throws(EncodingError) -> String? { try readBool() ? try readString() : nil }
    /// Reads an optional signed integer.
    public mutating func readOptionalInt64() throws(EncodingError) -> Int64? { try readBool() ? try readInt64() : nil }
    /// Reads a fixed-size value, checking its length.
    public mutating func read<T: FixedSizeBytes>(_: T.Type) throws(EncodingError) -> T {
        do { return try T(bytes: try readBytes()) } catch let e as CryptoError { throw .invalidValue(e.description) } catch {
            throw error as! EncodingError
        }
    }
    /// Reads a UUID (exactly 16 bytes).
    public mutating func readUUID() throws(EncodingError) -> UUID {
        let b = try readBytes()
        guard b.count == 16 else { throw .invalidValue("uuid") }
        return UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
    }
    /// Throws unless every byte has been read: trailing bytes are an error, not ignored.
    public func finish() throws(EncodingError) {
        guard offset == bytes.count else { throw .trailingBytes(bytes.count - offset) }
    }
}

/// Why a canonical encoding could not be read.
public enum EncodingError: Error, Equatable, Sendable {
    /// The statement's label is not the expected one.
    case wrongDomain(expected: String, found: String)
    /// The bytes ended inside a field.
    case truncated
    /// Bytes remained after the last field.
    case trailingBytes(Int)
    /// A field held a value outside its domain.
    case invalidValue(String)
}
