/// Every failure VaultCrypto can report. Each case names the check that failed, so callers (and people
/// reading logs) can tell a wrong length from a failed authentication from bad parameters.
public enum CryptoError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A value had the wrong number of bytes for its kind (`what` names the kind).
    case invalidLength(what: String, expected: Int, actual: Int)
    /// A value's length was outside the allowed range for its kind.
    case lengthOutOfRange(what: String, min: Int, max: Int, actual: Int)
    /// AEAD decryption failed: wrong key, wrong associated data, wrong nonce or modified ciphertext.
    case authenticationFailed
    /// An Ed25519 signature did not verify under the given public key.
    case invalidSignature
    /// A sealed box could not be opened with the given key pair (not for us, or modified).
    case sealedBoxOpenFailed
    /// Padding was malformed when removing it.
    case invalidPadding
    /// Key-derivation parameters below the floor, above the ceiling, or of an unknown algorithm.
    case invalidParameters(String)
    /// Argon2id failed, in practice because the memory limit could not be allocated.
    case passwordHashingFailed
    /// A public key was rejected (e.g. an X25519 point of low order giving an all-zero shared secret).
    case invalidPublicKey
    /// Text was not valid base64url (unpadded) or hex.
    case invalidEncoding(what: String)
    /// A key-derivation context was not exactly eight bytes.
    case invalidContext(String)

    public var description: String {
        switch self {
        case let .invalidLength(what, expected, actual):
            return "\(what) must be \(expected) bytes, got \(actual)"
        case let .lengthOutOfRange(what, min, max, actual):
            return "\(what) must be \(min)...\(max) bytes, got \(actual)"
        case .authenticationFailed: return "authentication failed: ciphertext, nonce, key or associated data do not match"
        case .invalidSignature: return "signature verification failed"
        case .sealedBoxOpenFailed: return "sealed box could not be opened with this key"
        case .invalidPadding: return "invalid padding"
        case let .invalidParameters(why): return "invalid key-derivation parameters: \(why)"
        case .passwordHashingFailed: return "password hashing failed (out of memory?)"
        case .invalidPublicKey: return "public key rejected"
        case let .invalidEncoding(what): return "invalid encoding of \(what)"
        case let .invalidContext(ctx): return "key-derivation context must be exactly 8 bytes, got \(ctx.utf8.count)"
        }
    }
}

@inline(__always)
func checkLength(_ what: String, _ actual: Int, _ expected: Int) throws(CryptoError) {
    if actual != expected { throw CryptoError.invalidLength(what: what, expected: expected, actual: actual) }
}
