import CSodium

/// BLAKE2b (`crypto_generichash`), unkeyed for content hashes and keyed for MACs and stable record ids.
public enum BLAKE2b {
    /// Allowed output lengths, per libsodium.
    public static let outputLengths = Int(crypto_generichash_bytes_min())...Int(crypto_generichash_bytes_max())
    /// Allowed key lengths, per libsodium.
    public static let keyLengths = Int(crypto_generichash_keybytes_min())...Int(crypto_generichash_keybytes_max())

    /// The unkeyed hash of `data` (32 bytes unless `outputLength` says otherwise).
    public static func hash(_ data: [UInt8], outputLength: Int = 32) throws(CryptoError) -> [UInt8] {
        try hash(data, outputLength: outputLength, keyPointer: nil, keyLength: 0)
    }

    /// The hash of `data` keyed with `key`.
    public static func hash(_ data: [UInt8], key: SymmetricKey, outputLength: Int = 32) throws(CryptoError) -> [UInt8] {
        try hash(data, key: key.secret, outputLength: outputLength)
    }

    /// The hash of `data` keyed with secret bytes of 16 to 64 bytes.
    public static func hash(_ data: [UInt8], key: SecureBytes, outputLength: Int = 32) throws(CryptoError) -> [UInt8] {
        guard keyLengths.contains(key.count) else {
            throw .lengthOutOfRange(what: "BLAKE2b key", min: keyLengths.lowerBound, max: keyLengths.upperBound, actual: key.count)
        }
        return try key.withUnsafeBytes { (k) throws(CryptoError) -> [UInt8] in
            try hash(data, outputLength: outputLength, keyPointer: k.baseAddress!.assumingMemoryBound(to: UInt8.self), keyLength: k.count)
        }
    }

    /// The unkeyed 32-byte hash of the bytes `body` hands to `update`, in order, as if they were one
    /// string: a large message made of parts is hashed without first copying the parts into one buffer.
    public static func hash(parts body: ((UnsafeRawBufferPointer) -> Void) -> Void) -> [UInt8] {
        Sodium.ensureInitialized()
        return withUnsafeTemporaryAllocation(byteCount: crypto_generichash_blake2b_statebytes(), alignment: 64) { raw in
            let state = OpaquePointer(raw.baseAddress!)
            _ = crypto_generichash_blake2b_init(state, nil, 0, 32)
            body { part in _ = crypto_generichash_blake2b_update(state, part.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(part.count)) }
            var out = [UInt8](repeating: 0, count: 32)
            _ = crypto_generichash_blake2b_final(state, &out, 32)
            return out
        }
    }

    private static func hash(_ data: [UInt8], outputLength: Int, keyPointer: UnsafePointer<UInt8>?, keyLength: Int) throws(CryptoError) -> [UInt8] {
        Sodium.ensureInitialized()
        guard outputLengths.contains(outputLength) else {
            throw .lengthOutOfRange(what: "BLAKE2b output", min: outputLengths.lowerBound, max: outputLengths.upperBound, actual: outputLength)
        }
        var out = [UInt8](repeating: 0, count: outputLength)
        _ = crypto_generichash(&out, outputLength, data, UInt64(data.count), keyPointer, keyLength)
        return out
    }
}

/// ISO/IEC 7816-4 padding (`sodium_pad` / `sodium_unpad`), hiding exact lengths inside a block size.
public enum Padding {
    /// Pads `bytes` to the next multiple of `blockSize` (always adding at least one byte). The work of
    /// `sodium_pad` is constant-time over one block, so the block size is what it costs, not the length.
    public static func pad(_ bytes: consuming [UInt8], blockSize: Int) throws(CryptoError) -> [UInt8] {
        Sodium.ensureInitialized()
        guard blockSize > 0 else { throw .lengthOutOfRange(what: "padding block size", min: 1, max: Int.max, actual: blockSize) }
        let unpaddedLength = bytes.count
        let (quotient, overflow) = (unpaddedLength / blockSize + 1).multipliedReportingOverflow(by: blockSize)
        guard !overflow else { throw .invalidPadding }
        // Grows the caller's array in place when it is not shared (one allocation, no extra copy).
        var buffer = bytes
        buffer.append(contentsOf: repeatElement(0, count: quotient - unpaddedLength))
        var paddedLength = 0
        let rc = sodium_pad(&paddedLength, &buffer, unpaddedLength, blockSize, buffer.count)
        guard rc == 0, paddedLength <= buffer.count else { throw .invalidPadding }
        buffer.removeLast(buffer.count - paddedLength)
        return buffer
    }

    /// Removes padding added by `pad` with the same block size; throws `CryptoError.invalidPadding`
    /// when the padding is malformed. Only the last `blockSize` bytes are examined (in constant time).
    public static func unpad(_ bytes: consuming [UInt8], blockSize: Int) throws(CryptoError) -> [UInt8] {
        Sodium.ensureInitialized()
        guard blockSize > 0, !bytes.isEmpty, bytes.count % blockSize == 0 else { throw .invalidPadding }
        var unpaddedLength = 0
        let rc = sodium_unpad(&unpaddedLength, bytes, bytes.count, blockSize)
        guard rc == 0, unpaddedLength <= bytes.count else { throw .invalidPadding }
        // Truncates in place when the caller's array is not shared.
        var buffer = bytes
        buffer.removeLast(buffer.count - unpaddedLength)
        return buffer
    }
}
