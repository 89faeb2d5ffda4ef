/// Why an envelope was rejected (Docs/envelope-v1.md §4.4). Every case is an integrity failure: the
/// reader applies nothing from such an envelope.
public enum EnvelopeError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Step 1: a format version other than 1.
    case unsupportedVersion(UInt8)
    /// Step 1: a header field outside its domain (record type, epoch 0, record id length, …).
    case malformed(String)
    /// Step 2: the header names another owner, tresor or category than the reader asked for.
    case wrongContext(field: String)
    /// Step 2: the author is not the owner.
    case authorNotOwner
    /// Step 3: the author's signature does not verify.
    case invalidSignature
    /// Step 4: the reader holds no key for the named epoch.
    case missingEpochKey(UInt32)
    /// Step 5: AEAD decryption failed (modified ciphertext, nonce or associated data, or wrong key).
    case decryptionFailed
    /// Step 6: padding malformed or not a bucket.
    case invalidPadding
    /// Step 6: the payload is not a valid record.
    case malformedPayload(String)
    /// Step 6: the payload contradicts the header (type, category, tombstone).
    case payloadMismatch(String)

    public var description: String {
        switch self {
        case let .unsupportedVersion(v): return "envelope format version \(v) is not supported"
        case let .malformed(why): return "envelope is malformed: \(why)"
        case let .wrongContext(field): return "envelope belongs to another \(field)"
        case .authorNotOwner: return "envelope author is not the record owner"
        case .invalidSignature: return "envelope signature is not valid"
        case let .missingEpochKey(e): return "no key for tresor epoch \(e)"
        case .decryptionFailed: return "envelope failed authentication (tampered ciphertext or header)"
        case .invalidPadding: return "envelope padding is invalid"
        case let .malformedPayload(why): return "envelope payload is malformed: \(why)"
        case let .payloadMismatch(why): return "envelope payload contradicts its header: \(why)"
        }
    }
}
