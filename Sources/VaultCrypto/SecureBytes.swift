import CSodium

/// Secret bytes in memory the process owns: zeroed with `sodium_memzero` when released, compared in
/// constant time, and never printed. Deliberately not `Codable`: a secret is serialised only by code that
/// means to (and then usually encrypted), never by a stray `JSONEncoder`.
public final class SecureBytes: @unchecked Sendable {
    // Immutable after init; the buffer is only read afterwards, so sharing across tasks is safe.
    private let buffer: UnsafeMutableRawBufferPointer

    /// The number of secret bytes.
    public var count: Int { buffer.count }

    /// Copies `bytes` into zero-on-release storage. The caller remains responsible for its own copy.
    public init<C: Collection>(copying bytes: C) where C.Element == UInt8 {
        buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
        _ = buffer.initializeMemory(as: UInt8.self, from: bytes)
        storedCount = bytes.count
    }

    /// Allocates `count` bytes and lets `body` fill them (e.g. a libsodium call writing a key).
    /// If `body` throws, the bytes are zeroed before the error propagates.
    public init<E: Error>(count: Int, _ body: (UnsafeMutableRawBufferPointer) throws(E) -> Void) throws(E) {
        let raw = UnsafeMutableRawBufferPointer.allocate(byteCount: max(count, 1), alignment: 16)
        raw.initializeMemory(as: UInt8.self, repeating: 0)
        let slice = UnsafeMutableRawBufferPointer(rebasing: raw[0..<count])
        do {
            try body(slice)
        } catch {
            sodium_memzero(raw.baseAddress, raw.count)
            raw.deallocate()
            throw error
        }
        buffer = raw
        storedCount = count
    }

    /// `count` fresh random bytes.
    public static func random(count: Int) -> SecureBytes {
        Sodium.ensureInitialized()
        return SecureBytes(count: count) { if $0.count > 0 { randombytes_buf($0.baseAddress!, $0.count) } }
    }

    private let storedCount: Int

    deinit {
        sodium_memzero(buffer.baseAddress, buffer.count)
        buffer.deallocate()
    }

    /// Read access to the secret bytes for the duration of `body`. Do not let the pointer escape.
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(rebasing: buffer[0..<storedCount]))
    }

    /// A copy of the bytes as an array, for code that must serialise the secret (e.g. before sealing it).
    /// The caller owns the copy and should keep it short-lived.
    public func copyBytes() -> [UInt8] {
        withUnsafeBytes { Array($0) }
    }

    /// Constant-time comparison with another secret of the same length.
    public func constantTimeEquals(_ other: SecureBytes) -> Bool {
        guard count == other.count else { return false }
        return withUnsafeBytes { a in
            other.withUnsafeBytes { b in sodium_memcmp(a.baseAddress, b.baseAddress, count) == 0 }
        }
    }
}

extension SecureBytes: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "SecureBytes(\(count) bytes, redacted)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}
