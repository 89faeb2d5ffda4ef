import Foundation
import VaultCrypto

/// What a reader expects an envelope to belong to (Docs/envelope-v1.md §4.4 step 2).
public struct EnvelopeContext: Sendable, Hashable {
    public var ownerID: UUID
    public var tresorID: UUID?
    public var category: String?

    public init(ownerID: UUID, tresorID: UUID? = nil, category: String? = nil) {
        self.ownerID = ownerID
        self.tresorID = tresorID
        self.category = category
    }
}

/// One version of one record, sealed (Docs/envelope-v1.md §4): the header in the clear, the padded
/// payload encrypted under the tresor epoch key with the header as associated data, and the author's
/// signature over header, nonce and ciphertext.
public struct Envelope: Codable, Sendable, Hashable {
    /// The only format version this code reads and writes.
    public static let formatVersion: UInt8 = 1
    /// The smallest padding bucket.
    public static let minimumBucket = 256

    public var header: RecordHeader
    public var nonce: AEADNonce
    /// XChaCha20-Poly1305 ciphertext with its tag (base64url on the wire).
    public var ciphertext: [UInt8]
    /// The author's Ed25519 signature (§4.3).
    public var signature: Signature

    public init(header: RecordHeader, nonce: AEADNonce, ciphertext: [UInt8], signature: Signature) {
        self.header = header
        self.nonce = nonce
        self.ciphertext = ciphertext
        self.signature = signature
    }

    // MARK: §4.2 padding buckets

    /// The padded size of a payload of `length` bytes: max(256, Padmé(length + 1)).
    public static func bucket(forPayloadLength length: Int) -> Int {
        max(minimumBucket, padme(length + 1))
    }

    /// The block size handed to `sodium_pad` / `sodium_unpad` for a bucket of `n` bytes: the bucket
    /// itself for the minimum bucket, else the bucket's Padmé step 2^(E−S) (E = ⌊log2 n⌋, S = ⌊log2 E⌋ + 1).
    /// Padmé puts the end of every payload of that bucket within its last step, so padding to the next
    /// multiple of the step gives exactly the bucket, and the constant-time scan covers one step, not
    /// the whole bucket (Docs/envelope-v1.md §4.2). The padded bytes are the same either way.
    static func paddingBlock(forBucket n: Int) -> Int {
        guard n > minimumBucket else { return n }
        let e = Int.bitWidth - 1 - n.leadingZeroBitCount
        let s = Int.bitWidth - 1 - e.leadingZeroBitCount + 1
        return 1 << (e - s)
    }

    /// Padmé (Nikitin et al., PETS 2019): rounds `length` up so that only its top ⌊log2 E⌋ + 1 bits can
    /// be non-zero, where E = ⌊log2 length⌋. Its outputs are its own fixed points.
    public static func padme(_ length: Int) -> Int {
        guard length > 1 else { return length }
        let e = Int.bitWidth - 1 - length.leadingZeroBitCount
        let s = Int.bitWidth - 1 - e.leadingZeroBitCount + 1
        let lastBits = e - s
        let mask = (1 << lastBits) - 1
        return (length + mask) & ~mask
    }

    // MARK: §4.3 seal

    /// Pads and encrypts `payload` under `key` for `header`, and signs as `author`.
    public static func seal(payload: [UInt8], header: RecordHeader, key: SymmetricKey, author: SigningKeyPair) throws(EnvelopeError) -> Envelope {
        try header.validateStructure()
        let bucket = bucket(forPayloadLength: payload.count)
        let padded: [UInt8]
        do { padded = try Padding.pad(payload, blockSize: paddingBlock(forBucket: bucket)) } catch { throw .invalidPadding }
        guard padded.count == bucket else { throw .invalidPadding }
        let nonce = AEADNonce.random()
        let ad = header.associatedData()
        let ciphertext = AEAD.seal(padded, key: key, nonce: nonce, associatedData: ad)
        let signature = author.sign(signedBytes(associatedData: ad, nonce: nonce, ciphertext: ciphertext))
        return Envelope(header: header, nonce: nonce, ciphertext: ciphertext, signature: signature)
    }

    /// The bytes the author signs, for a caller that already holds the header's associated data.
    public static func signedBytes(associatedData ad: [UInt8], nonce: AEADNonce, ciphertext: [UInt8]) -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-envelope-sig-v1", capacity: 64 + ad.count + AEADNonce.byteCount + ciphertext.count)
        w.append(ad)
        w.append(nonce)
        w.append(ciphertext)
        return w.bytes
    }

    /// The bytes the author signs.
    public var signedBytes: [UInt8] { Self.signedBytes(associatedData: header.associatedData(), nonce: nonce, ciphertext: ciphertext) }

    /// The version id (§4.3): the same envelope always has the same id, so pushes are idempotent.
    public var versionID: String { versionID(associatedData: header.associatedData()) }

    /// The version id, for a caller that already holds the header's associated data.
    /// The canonical statement (domain, associated data, nonce, ciphertext, signature) is hashed in three
    /// parts, the ciphertext in place: the same bytes, without copying a large ciphertext first.
    public func versionID(associatedData ad: [UInt8]) -> String {
        var head = CanonicalWriter(domain: "CareVault-envelope-id-v1", capacity: 64 + ad.count + AEADNonce.byteCount)
        head.append(ad)
        head.append(nonce)
        head.append(UInt32(ciphertext.count))
        // The signature as `CanonicalWriter.append` writes a fixed-size value: its length, then its bytes.
        let signed = signature.bytes
        let tail = withUnsafeBytes(of: UInt32(signed.count).bigEndian, Array.init) + signed
        return Hex.encode(
            BLAKE2b.hash { update in
                head.bytes.withUnsafeBytes(update)
                ciphertext.withUnsafeBytes(update)
                tail.withUnsafeBytes(update)
            }
        )
    }

    /// §4.4 steps 1 and 2: the header's structure, and that it names what the reader expects.
    func checkStructure(expecting context: EnvelopeContext?) throws(EnvelopeError) {
        try header.validateStructure()
        if let context {
            guard header.ownerID == context.ownerID else { throw .wrongContext(field: "owner") }
            if let t = context.tresorID, t != header.tresorID { throw .wrongContext(field: "tresor") }
            if let c = context.category, c != header.category { throw .wrongContext(field: "category") }
        }
    }

    /// §4.4 steps 1 to 3, which need no tresor key: structure, context, author signature. The server
    /// runs this too, with the owner's certified key.
    public func verify(authorKey: SigningPublicKey, expecting context: EnvelopeContext? = nil) throws(EnvelopeError) {
        try verify(authorKey: authorKey, expecting: context, associatedData: header.associatedData())
    }

    func verify(authorKey: SigningPublicKey, expecting context: EnvelopeContext?, associatedData ad: [UInt8]) throws(EnvelopeError) {
        try checkStructure(expecting: context)
        guard authorKey.isValidSignature(signature, for: Self.signedBytes(associatedData: ad, nonce: nonce, ciphertext: ciphertext)) else {
            throw .invalidSignature
        }
    }

    /// §4.4 steps 1 to 6 up to the padding: returns the payload bytes, or throws the first failed check.
    public func open(
        keys: [UInt32: SymmetricKey],
        authorKey: SigningPublicKey,
        expecting context: EnvelopeContext? = nil
    ) throws(EnvelopeError) -> [UInt8] {
        let ad = header.associatedData()
        try verify(authorKey: authorKey, expecting: context, associatedData: ad)
        guard let key = keys[header.epoch] else { throw .missingEpochKey(header.epoch) }
        return try decrypt(key: key, associatedData: ad)
    }

    /// Steps 5 and the padding part of 6, for a caller that has already run `verify`.
    public func decrypt(key: SymmetricKey) throws(EnvelopeError) -> [UInt8] {
        try decrypt(key: key, associatedData: header.associatedData())
    }

    func decrypt(key: SymmetricKey, associatedData ad: [UInt8]) throws(EnvelopeError) -> [UInt8] {
        let padded: [UInt8]
        do { padded = try AEAD.open(ciphertext, key: key, nonce: nonce, associatedData: ad) } catch {
            throw .decryptionFailed
        }
        let n = padded.count
        guard n >= Self.minimumBucket, Self.padme(n) == n else { throw .invalidPadding }
        let payload: [UInt8]
        do { payload = try Padding.unpad(padded, blockSize: Self.paddingBlock(forBucket: n)) } catch { throw .invalidPadding }
        guard Self.bucket(forPayloadLength: payload.count) == n else { throw .invalidPadding }
        return payload
    }

    // MARK: Codable: binary fields as base64url

    enum CodingKeys: String, CodingKey { case header, nonce, ciphertext, signature }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        header = try c.decode(RecordHeader.self, forKey: .header)
        nonce = try c.decode(AEADNonce.self, forKey: .nonce)
        signature = try c.decode(Signature.self, forKey: .signature)
        do { ciphertext = try Base64URL.decode(try c.decode(String.self, forKey: .ciphertext), what: "ciphertext") } catch let e as CryptoError {
            throw DecodingError.dataCorruptedError(forKey: .ciphertext, in: c, debugDescription: e.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(header, forKey: .header)
        try c.encode(nonce, forKey: .nonce)
        try c.encode(Base64URL.encode(ciphertext), forKey: .ciphertext)
        try c.encode(signature, forKey: .signature)
    }
}
