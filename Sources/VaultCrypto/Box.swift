import CSodium

/// An X25519 public key, the recipient of sealed boxes.
public struct BoxPublicKey: FixedSizeBytes {
    public static let byteCount = 32
    public static let kindName = "X25519 public key"
    public let bytes: [UInt8]
    public init(uncheckedBytes: [UInt8]) { bytes = uncheckedBytes }
}

/// An X25519 key pair for `crypto_box_seal`. The secret half is zeroed when released and never printed.
public struct BoxKeyPair: Sendable, CustomStringConvertible {
    /// The public half, safe to publish.
    public let publicKey: BoxPublicKey
    /// The 32-byte X25519 secret scalar.
    public let secretKey: SecureBytes

    /// A fresh random key pair.
    public static func generate() -> BoxKeyPair {
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: BoxPublicKey.byteCount)
        let sk = SecureBytes(count: Int(crypto_box_secretkeybytes())) { sk in
            _ = crypto_box_keypair(&pk, sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return BoxKeyPair(publicKey: BoxPublicKey(uncheckedBytes: pk), secretKey: sk)
    }

    /// Re-creates the pair from its 32-byte secret key (as stored in a key bundle).
    public init(secretKey: SecureBytes) throws(CryptoError) {
        Sodium.ensureInitialized()
        try checkLength("X25519 secret key", secretKey.count, Int(crypto_box_secretkeybytes()))
        var pk = [UInt8](repeating: 0, count: BoxPublicKey.byteCount)
        secretKey.withUnsafeBytes { sk in
            _ = crypto_scalarmult_base(&pk, sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        self.publicKey = BoxPublicKey(uncheckedBytes: pk)
        self.secretKey = secretKey
    }

    private init(publicKey: BoxPublicKey, secretKey: SecureBytes) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    public var description: String { "BoxKeyPair(public: \(publicKey.base64URL), secret: <redacted>)" }
}

/// Anonymous public-key encryption (`crypto_box_seal`): anyone can seal to a public key, only the holder
/// of the secret key can open, and the box says nothing about who sealed it (signatures do that).
public enum SealedBox {
    /// The bytes a sealed box adds to its message (ephemeral public key + tag).
    public static let overhead = Int(crypto_box_sealbytes())

    /// Seals `message` to `recipient`.
    public static func seal(_ message: [UInt8], to recipient: BoxPublicKey) -> [UInt8] {
        Sodium.ensureInitialized()
        var out = [UInt8](repeating: 0, count: message.count + overhead)
        _ = crypto_box_seal(&out, message, UInt64(message.count), recipient.bytes)
        return out
    }

    /// Opens a sealed box into zero-on-release memory; throws `CryptoError.sealedBoxOpenFailed` if it was
    /// not sealed to `recipient` or was modified.
    public static func open(_ box: [UInt8], with recipient: BoxKeyPair) throws(CryptoError) -> SecureBytes {
        Sodium.ensureInitialized()
        guard box.count >= overhead else {
            throw CryptoError.lengthOutOfRange(what: "sealed box", min: overhead, max: Int.max, actual: box.count)
        }
        return try recipient.secretKey.withUnsafeBytes { (sk) throws(CryptoError) -> SecureBytes in
            try SecureBytes(count: box.count - overhead) { (out) throws(CryptoError) in
                let rc = crypto_box_seal_open(
                    out.baseAddress!.assumingMemoryBound(to: UInt8.self),
                    box,
                    UInt64(box.count),
                    recipient.publicKey.bytes,
                    sk.baseAddress!.assumingMemoryBound(to: UInt8.self)
                )
                if rc != 0 { throw CryptoError.sealedBoxOpenFailed }
            }
        }
    }
}

/// Raw X25519 scalar multiplication (`crypto_scalarmult`), exposed for conformance testing.
public enum X25519 {
    /// The shared point of `secretKey` and `publicKey`. Throws `CryptoError.invalidPublicKey` when the
    /// result is all zeros (a low-order public point), as libsodium refuses it.
    public static func sharedSecret(secretKey: SecureBytes, publicKey: BoxPublicKey) throws(CryptoError) -> SecureBytes {
        Sodium.ensureInitialized()
        try checkLength("X25519 secret key", secretKey.count, Int(crypto_scalarmult_scalarbytes()))
        return try secretKey.withUnsafeBytes { (sk) throws(CryptoError) -> SecureBytes in
            try SecureBytes(count: Int(crypto_scalarmult_bytes())) { (out) throws(CryptoError) in
                let rc = crypto_scalarmult(
                    out.baseAddress!.assumingMemoryBound(to: UInt8.self),
                    sk.baseAddress!.assumingMemoryBound(to: UInt8.self),
                    publicKey.bytes
                )
                if rc != 0 { throw CryptoError.invalidPublicKey }
            }
        }
    }
}
