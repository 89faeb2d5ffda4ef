import CSodium

/// Unpadded URL-safe base64 (RFC 4648 §5), the encoding of keys and binary fields on the wire.
/// Decoding is strict: padding, whitespace or any character outside the alphabet is an error.
public enum Base64URL {
    /// Encodes bytes as unpadded base64url.
    public static func encode<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        Sodium.ensureInitialized()
        let input = Array(bytes)
        let variant = sodium_base64_VARIANT_URLSAFE_NO_PADDING
        let length = sodium_base64_encoded_len(input.count, variant)
        var output = [CChar](repeating: 0, count: length)
        input.withUnsafeBufferPointer { inp in
            _ = sodium_bin2base64(&output, length, inp.baseAddress, inp.count, variant)
        }
        return output.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// Decodes unpadded base64url, throwing `CryptoError.invalidEncoding` for anything else.
    public static func decode(_ text: String, what: String = "base64url") throws(CryptoError) -> [UInt8] {
        Sodium.ensureInitialized()
        let utf8 = Array(text.utf8)
        if utf8.isEmpty { return [] }
        var output = [UInt8](repeating: 0, count: utf8.count * 3 / 4 + 1)
        var written = 0
        var end: UnsafePointer<CChar>? = nil
        let result: Int32 = utf8.withUnsafeBufferPointer { inp in
            inp.withMemoryRebound(to: CChar.self) { chars in
                let r = sodium_base642bin(
                    &output,
                    output.count,
                    chars.baseAddress,
                    chars.count,
                    nil,
                    &written,
                    &end,
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING
                )
                // The whole input must be consumed: a stray character is an error, not a truncation.
                if r == 0, let end, end != chars.baseAddress! + chars.count { return -1 }
                return r
            }
        }
        guard result == 0 else { throw CryptoError.invalidEncoding(what: what) }
        return Array(output.prefix(written))
    }
}

/// Lower-case hexadecimal, used for ids and hashes in logs and tables.
public enum Hex {
    /// Encodes bytes as lower-case hex.
    @inlinable
    public static func encode<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            var i = 0
            for b in bytes {
                out[i] = digit(b >> 4)
                out[i + 1] = digit(b & 0x0f)
                i += 2
            }
            return i
        }
    }

    /// The lower-case hex digit of a nibble.
    @inlinable
    static func digit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 48 + nibble : 87 + nibble }

    /// Decodes hex (either case); throws on odd length or a non-hex character.
    public static func decode(_ text: String, what: String = "hex") throws(CryptoError) -> [UInt8] {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { throw CryptoError.invalidEncoding(what: what) }
        func nibble(_ c: UInt8) throws(CryptoError) -> UInt8 {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            case 65...70: return c - 55
            default: throw CryptoError.invalidEncoding(what: what)
            }
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            out.append(try nibble(chars[i]) << 4 | nibble(chars[i + 1]))
            i += 2
        }
        return out
    }
}

/// Cryptographically secure random bytes from libsodium.
public enum RandomBytes {
    /// `count` random bytes. For secrets prefer `SecureBytes.random(count:)`.
    public static func bytes(count: Int) -> [UInt8] {
        Sodium.ensureInitialized()
        var out = [UInt8](repeating: 0, count: count)
        if count > 0 { out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) } }
        return out
    }

    /// A uniformly random integer in 0..<upperBound (no modulo bias).
    public static func uniform(_ upperBound: UInt32) -> UInt32 {
        Sodium.ensureInitialized()
        return randombytes_uniform(upperBound)
    }
}

/// Comparison whose running time does not depend on where two byte strings differ.
public enum ConstantTime {
    /// True when `a` and `b` have the same length and the same bytes. Length itself is not secret.
    public static func equals<A: Collection, B: Collection>(_ a: A, _ b: B) -> Bool
    where A.Element == UInt8, B.Element == UInt8 {
        Sodium.ensureInitialized()
        let x = Array(a)
        let y = Array(b)
        guard x.count == y.count else { return false }
        if x.isEmpty { return true }
        return x.withUnsafeBytes { p in y.withUnsafeBytes { q in sodium_memcmp(p.baseAddress, q.baseAddress, x.count) == 0 } }
    }
}

/// Wiping of ordinary arrays that briefly held secret bytes (e.g. a serialised key before sealing).
public enum Memory {
    /// Overwrites every byte of `bytes` with zero in a way the optimiser cannot remove.
    public static func zero(_ bytes: inout [UInt8]) {
        Sodium.ensureInitialized()
        bytes.withUnsafeMutableBytes { if let base = $0.baseAddress { sodium_memzero(base, $0.count) } }
    }
}
