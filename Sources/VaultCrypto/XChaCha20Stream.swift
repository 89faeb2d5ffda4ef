import CSodium

/// The XChaCha20 keystream (`crypto_stream_xchacha20`) without a MAC. It expands a 32-byte seed into
/// pseudorandom bytes (the LtHash of Docs/envelope-v1.md §3.4); it never encrypts anything, because
/// without authentication a keystream cipher gives no integrity.
public enum XChaCha20Stream {
    /// The key length, 32 bytes.
    public static let keyLength = Int(crypto_stream_xchacha20_keybytes())
    /// The nonce length, 24 bytes.
    public static let nonceLength = Int(crypto_stream_xchacha20_noncebytes())

    /// `count` keystream bytes under `key` and `nonce`.
    public static func keystream(count: Int, key: [UInt8], nonce: [UInt8]) throws(CryptoError) -> [UInt8] {
        Sodium.ensureInitialized()
        guard key.count == keyLength else { throw .invalidLength(what: "XChaCha20 key", expected: keyLength, actual: key.count) }
        guard nonce.count == nonceLength else { throw .invalidLength(what: "XChaCha20 nonce", expected: nonceLength, actual: nonce.count) }
        guard count >= 0 else { throw .lengthOutOfRange(what: "keystream length", min: 0, max: Int.max, actual: count) }
        var out = [UInt8](repeating: 0, count: count)
        _ = crypto_stream_xchacha20(&out, UInt64(count), nonce, key)
        return out
    }
}
