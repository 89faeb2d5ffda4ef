import CSodium

/// An Ed25519 public key: verifies detached signatures.
public struct SigningPublicKey: FixedSizeBytes {
    public static let byteCount = 32
    public static let kindName = "Ed25519 public key"
    public let bytes: [UInt8]
    public init(uncheckedBytes: [UInt8]) { bytes = uncheckedBytes }

    /// True when `signature` is a valid signature of `message` under this key.
    public func isValidSignature(_ signature: Signature, for message: [UInt8]) -> Bool {
        Sodium.ensureInitialized()
        return crypto_sign_verify_detached(signature.bytes, message, UInt64(message.count), bytes) == 0
    }

    /// Throws `CryptoError.invalidSignature` unless `signature` verifies for `message`.
    public func verify(_ signature: Signature, for message: [UInt8]) throws(CryptoError) {
        guard isValidSignature(signature, for: message) else { throw CryptoError.invalidSignature }
    }
}

/// An Ed25519 signing key pair. The secret half is zeroed when released and never printed.
public struct SigningKeyPair: Sendable, CustomStringConvertible {
    /// The public half, safe to publish.
    public let publicKey: SigningPublicKey
    /// libsodium's 64-byte secret key (seed followed by public key).
    private let secretKey: SecureBytes

    /// A fresh random key pair.
    public static func generate() -> SigningKeyPair {
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: SigningPublicKey.byteCount)
        let sk = SecureBytes(count: Int(crypto_sign_secretkeybytes())) { sk in
            _ = crypto_sign_keypair(&pk, sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return SigningKeyPair(publicKey: SigningPublicKey(uncheckedBytes: pk), secretKey: sk)
    }

    /// Re-creates the key pair from its 32-byte seed (as stored in a key bundle).
    public init(seed: SecureBytes) throws(CryptoError) {
        Sodium.ensureInitialized()
        try checkLength("Ed25519 seed", seed.count, Int(crypto_sign_seedbytes()))
        var pk = [UInt8](repeating: 0, count: SigningPublicKey.byteCount)
        secretKey = seed.withUnsafeBytes { s in
            SecureBytes(count: Int(crypto_sign_secretkeybytes())) { sk in
                _ = crypto_sign_seed_keypair(
                    &pk,
                    sk.baseAddress!.assumingMemoryBound(to: UInt8.self),
                    s.baseAddress!.assumingMemoryBound(to: UInt8.self)
                )
            }
        }
        publicKey = SigningPublicKey(uncheckedBytes: pk)
    }

    private init(publicKey: SigningPublicKey, secretKey: SecureBytes) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// The 32-byte seed that re-creates this pair; what a key bundle stores.
    public var seed: SecureBytes {
        secretKey.withUnsafeBytes { sk in SecureBytes(copying: UnsafeRawBufferPointer(rebasing: sk[0..<32])) }
    }

    /// A detached Ed25519 signature of `message`.
    public func sign(_ message: [UInt8]) -> Signature {
        var sig = [UInt8](repeating: 0, count: Signature.byteCount)
        secretKey.withUnsafeBytes { sk in
            _ = crypto_sign_detached(&sig, nil, message, UInt64(message.count), sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return Signature(uncheckedBytes: sig)
    }

    public var description: String { "SigningKeyPair(public: \(publicKey.base64URL), secret: <redacted>)" }
}
