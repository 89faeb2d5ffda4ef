import CSodium

/// A 256-bit secret key: an XChaCha20-Poly1305 key, a `crypto_kdf` master key, or a keyed-hash key.
/// Zeroed when released, compared in constant time, printed as `<redacted>`, never `Codable`.
public struct SymmetricKey: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The length of every symmetric key.
    public static let byteCount = 32

    /// The secret bytes.
    public let secret: SecureBytes

    /// A fresh random key.
    public static func generate() -> SymmetricKey {
        SymmetricKey(unchecked: SecureBytes.random(count: byteCount))
    }

    /// Wraps existing key bytes; throws unless there are exactly 32.
    public init<C: Collection>(bytes: C) throws(CryptoError) where C.Element == UInt8 {
        try checkLength("symmetric key", bytes.count, Self.byteCount)
        secret = SecureBytes(copying: bytes)
    }

    /// Wraps secure bytes; throws unless there are exactly 32.
    public init(secret: SecureBytes) throws(CryptoError) {
        try checkLength("symmetric key", secret.count, Self.byteCount)
        self.secret = secret
    }

    init(unchecked secret: SecureBytes) { self.secret = secret }

    /// A copy of the key bytes, for code that must seal or wrap the key. Keep the copy short-lived.
    public func copyBytes() -> [UInt8] { secret.copyBytes() }

    public static func == (lhs: SymmetricKey, rhs: SymmetricKey) -> Bool { lhs.secret.constantTimeEquals(rhs.secret) }
    public var description: String { "SymmetricKey(<redacted>)" }
    public var debugDescription: String { description }
}

/// XChaCha20-Poly1305-IETF authenticated encryption with associated data (libsodium's
/// `crypto_aead_xchacha20poly1305_ietf_*`). The output is ciphertext followed by the 16-byte tag.
public enum AEAD {
    /// The Poly1305 tag length appended to every ciphertext.
    public static let tagByteCount = 16

    /// Encrypts `plaintext` under `key` and `nonce`, authenticating `associatedData` as well.
    public static func seal(_ plaintext: [UInt8], key: SymmetricKey, nonce: AEADNonce, associatedData: [UInt8] = []) -> [UInt8] {
        Sodium.ensureInitialized()
        // libsodium writes every byte of the output, so it is not zero-filled first. (The buffer handed
        // to the closure may be larger than asked for: only `count` bytes are written and kept.)
        let count = plaintext.count + tagByteCount
        return [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
            var outLen: UInt64 = 0
            key.secret.withUnsafeBytes { k in
                _ = crypto_aead_xchacha20poly1305_ietf_encrypt(
                    out.baseAddress!,
                    &outLen,
                    plaintext,
                    UInt64(plaintext.count),
                    associatedData,
                    UInt64(associatedData.count),
                    nil,
                    nonce.bytes,
                    k.baseAddress!.assumingMemoryBound(to: UInt8.self)
                )
            }
            initialized = count
        }
    }

    /// Decrypts and verifies. Throws `CryptoError.authenticationFailed` if the key, nonce, associated
    /// data or any ciphertext byte is wrong; never returns unauthenticated bytes.
    public static func open(_ ciphertext: [UInt8], key: SymmetricKey, nonce: AEADNonce, associatedData: [UInt8] = []) throws(CryptoError) -> [UInt8] {
        Sodium.ensureInitialized()
        guard ciphertext.count >= tagByteCount else {
            throw CryptoError.lengthOutOfRange(what: "AEAD ciphertext", min: tagByteCount, max: Int.max, actual: ciphertext.count)
        }
        var rc: Int32 = -1
        // Not zero-filled first: libsodium writes every byte on success, and on failure the buffer is
        // zeroed here before it is dropped, so unauthenticated bytes never escape. One spare byte keeps
        // the pointer valid for an empty plaintext (the tag is still checked).
        let count = ciphertext.count - tagByteCount
        let out = [UInt8](unsafeUninitializedCapacity: count + 1) { out, initialized in
            let base = out.baseAddress!
            var outLen: UInt64 = 0
            rc = key.secret.withUnsafeBytes { k in
                crypto_aead_xchacha20poly1305_ietf_decrypt(
                    base,
                    &outLen,
                    nil,
                    ciphertext,
                    UInt64(ciphertext.count),
                    associatedData,
                    UInt64(associatedData.count),
                    nonce.bytes,
                    k.baseAddress!.assumingMemoryBound(to: UInt8.self)
                )
            }
            if rc != 0 { sodium_memzero(base, count) }
            initialized = count
        }
        guard rc == 0 else { throw CryptoError.authenticationFailed }
        return out
    }
}
