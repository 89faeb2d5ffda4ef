/// A public value with a fixed length (nonce, public key, signature, salt). Conforming types check the
/// length when constructed, so a 32-byte key can never stand where a 24-byte nonce belongs. On the wire
/// they are unpadded base64url strings.
public protocol FixedSizeBytes: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The exact number of bytes of this kind.
    static var byteCount: Int { get }
    /// A human name for errors ("Ed25519 public key").
    static var kindName: String { get }
    /// The raw bytes.
    var bytes: [UInt8] { get }
    /// Wraps bytes already known to have `byteCount` length. Use `init(bytes:)` everywhere else.
    init(uncheckedBytes: [UInt8])
}

extension FixedSizeBytes {
    /// Wraps `bytes`, throwing `CryptoError.invalidLength` unless it has exactly `byteCount` bytes.
    public init<C: Collection>(bytes: C) throws(CryptoError) where C.Element == UInt8 {
        try checkLength(Self.kindName, bytes.count, Self.byteCount)
        self.init(uncheckedBytes: Array(bytes))
    }

    /// Parses unpadded base64url text.
    public init(base64URL text: String) throws(CryptoError) {
        try self.init(bytes: try Base64URL.decode(text, what: Self.kindName))
    }

    /// Unpadded base64url text of the bytes.
    public var base64URL: String { Base64URL.encode(bytes) }

    public var description: String { "\(Self.kindName)(\(base64URL))" }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        do {
            try self.init(base64URL: text)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(base64URL)
    }
}

/// A 24-byte XChaCha20-Poly1305 nonce. Always random: 192 bits make collisions negligible.
public struct AEADNonce: FixedSizeBytes {
    public static let byteCount = 24
    public static let kindName = "XChaCha20-Poly1305 nonce"
    public let bytes: [UInt8]
    public init(uncheckedBytes: [UInt8]) { bytes = uncheckedBytes }
    /// A fresh random nonce.
    public static func random() -> AEADNonce { AEADNonce(uncheckedBytes: RandomBytes.bytes(count: byteCount)) }
}

/// A 64-byte Ed25519 detached signature.
public struct Signature: FixedSizeBytes {
    public static let byteCount = 64
    public static let kindName = "Ed25519 signature"
    public let bytes: [UInt8]
    public init(uncheckedBytes: [UInt8]) { bytes = uncheckedBytes }
}

/// A 16-byte Argon2id salt, random per user.
public struct Salt: FixedSizeBytes {
    public static let byteCount = 16
    public static let kindName = "Argon2id salt"
    public let bytes: [UInt8]
    public init(uncheckedBytes: [UInt8]) { bytes = uncheckedBytes }
    /// A fresh random salt.
    public static func random() -> Salt { Salt(uncheckedBytes: RandomBytes.bytes(count: byteCount)) }
}
