// A deliberate exception to "only VaultCrypto imports CSodium": the floor must be libsodium with nothing
// of CareVault around it. The benchmark is not part of the product.
import CSodium

/// The physical floor of one record: raw libsodium on preallocated buffers, with no framing, padding,
/// JSON or allocation per record. Sealing is XChaCha20-Poly1305-IETF of a plaintext as long as the
/// envelope's padded payload, with associated data as long as the envelope's header, plus an Ed25519
/// signature over as many bytes as the envelope signs; opening is the Ed25519 verification plus the
/// decryption of those same bytes.
///
/// A sealed item is one contiguous blob: `message || signature || zero fill`, where
/// `message = prefix || ad || nonce || ciphertext` is exactly what is signed (the prefix stands for the
/// envelope's domain label and length fields, so the signed length matches the envelope's).
/// Not thread-safe: one instance per task.
final class RawEnvelopeFloor: @unchecked Sendable {
    let plaintextCount: Int
    let adCount: Int
    let prefixCount: Int
    var ciphertextCount: Int { plaintextCount + 16 }
    /// The signed length (prefix + ad + nonce + ciphertext).
    var messageCount: Int { prefixCount + adCount + 24 + ciphertextCount }
    /// The smallest blob that holds a sealed item.
    var itemCount: Int { messageCount + 64 }

    private let key: UnsafeMutablePointer<UInt8>
    private let secretKey: UnsafeMutablePointer<UInt8>
    private let publicKey: UnsafeMutablePointer<UInt8>
    private let plaintext: UnsafeMutablePointer<UInt8>
    private let opened: UnsafeMutablePointer<UInt8>
    /// Scratch of `openCommitted`: the version id and the record id (the head element's parts), the
    /// element's seed, its 2,048-byte expansion, and the LtHash16 lanes it is added to.
    private let element: UnsafeMutablePointer<UInt8>
    private let seed: UnsafeMutablePointer<UInt8>
    private let expansion: UnsafeMutablePointer<UInt8>
    private let lanes: UnsafeMutablePointer<UInt16>

    /// A floor for plaintexts of `plaintextCount` bytes, associated data `ad` and `signedCount` signed bytes.
    init(plaintextCount: Int, ad: [UInt8], signedCount: Int) {
        precondition(sodium_init() >= 0, "libsodium could not be initialised")
        self.plaintextCount = plaintextCount
        self.adCount = ad.count
        self.prefixCount = max(0, signedCount - ad.count - 24 - (plaintextCount + 16))
        key = .allocate(capacity: 32)
        secretKey = .allocate(capacity: 64)
        publicKey = .allocate(capacity: 32)
        plaintext = .allocate(capacity: max(plaintextCount, 1))
        opened = .allocate(capacity: max(plaintextCount, 1))
        element = .allocate(capacity: 64)
        seed = .allocate(capacity: 32)
        expansion = .allocate(capacity: 2_048)
        lanes = .allocate(capacity: 1_024)
        lanes.initialize(repeating: 0, count: 1_024)
        randombytes_buf(element, 64)
        randombytes_buf(key, 32)
        crypto_sign_keypair(publicKey, secretKey)
        randombytes_buf(plaintext, plaintextCount)
        adTemplate = ad
    }

    private let adTemplate: [UInt8]

    deinit {
        sodium_memzero(key, 32)
        sodium_memzero(secretKey, 64)
        for buffer in [key, secretKey, publicKey, plaintext, opened, element, seed, expansion] { buffer.deallocate() }
        lanes.deallocate()
    }

    /// A zeroed blob of `count` bytes (at least `itemCount`) with the associated data in place.
    func makeBlob(count: Int? = nil) -> [UInt8] {
        var blob = [UInt8](repeating: 0, count: max(count ?? itemCount, itemCount))
        blob.replaceSubrange(prefixCount..<(prefixCount + adCount), with: adTemplate)
        return blob
    }

    /// Seals into `blob`: a fresh random nonce, the encryption, the signature.
    func seal(into blob: UnsafeMutableRawBufferPointer) {
        let base = blob.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let ad = base + prefixCount
        let nonce = ad + adCount
        let ct = nonce + 24
        randombytes_buf(nonce, 24)
        crypto_aead_xchacha20poly1305_ietf_encrypt(ct, nil, plaintext, UInt64(plaintextCount), ad, UInt64(adCount), nil, nonce, key)
        crypto_sign_detached(base + messageCount, nil, base, UInt64(messageCount), secretKey)
    }

    /// Verifies the signature and decrypts; false if either fails.
    func open(_ blob: UnsafeRawBufferPointer) -> Bool {
        guard blob.count >= itemCount else { return false }
        let base = blob.baseAddress!.assumingMemoryBound(to: UInt8.self)
        guard crypto_sign_verify_detached(base + messageCount, base, UInt64(messageCount), publicKey) == 0 else { return false }
        let ad = base + prefixCount
        let nonce = ad + adCount
        let ct = nonce + 24
        return crypto_aead_xchacha20poly1305_ietf_decrypt(opened, nil, nil, ct, UInt64(ciphertextCount), ad, UInt64(adCount), nonce, key) == 0
    }

    /// What a pull authenticated by the patient's commitment still does per record
    /// (Docs/commitment-pages.md): the version id (BLAKE2b-256 of the whole item, signature included),
    /// the head's LtHash16 element (BLAKE2b-256 of record id and version id as the seed of 2,048 bytes of
    /// XChaCha20 keystream, added lane by lane), and the decryption; no signature check. False if the
    /// decryption fails.
    func openCommitted(_ blob: UnsafeRawBufferPointer) -> Bool {
        guard blob.count >= itemCount else { return false }
        let base = blob.baseAddress!.assumingMemoryBound(to: UInt8.self)
        crypto_generichash(element + 32, 32, base, UInt64(itemCount), nil, 0)
        crypto_generichash(seed, 32, element, 64, nil, 0)
        crypto_stream_xchacha20(expansion, 2_048, zeroNonce, seed)
        for i in 0..<1_024 { lanes[i] &+= UInt16(expansion[2 * i]) | UInt16(expansion[2 * i + 1]) << 8 }
        let ad = base + prefixCount
        let nonce = ad + adCount
        let ct = nonce + 24
        return crypto_aead_xchacha20poly1305_ietf_decrypt(opened, nil, nil, ct, UInt64(ciphertextCount), ad, UInt64(adCount), nonce, key) == 0
    }

    private let zeroNonce = [UInt8](repeating: 0, count: 24)

    /// `count` distinct sealed blobs of `blobCount` bytes each.
    func sealedBlobs(_ count: Int, blobCount: Int? = nil) -> [[UInt8]] {
        (0..<count).map { _ in
            var blob = makeBlob(count: blobCount)
            blob.withUnsafeMutableBytes { seal(into: $0) }
            return blob
        }
    }
}
