/// Bytes read as a string only when they are valid UTF-8, as `String(validating:as:)` reads them. Text of
/// plain ASCII (ids, keys, most notes) skips that initializer's generic path, whose metadata lookups
/// took more time than the reading itself in a doctor's view (Docs/benchmarks.md §3).
extension String {
    /// `bytes` as a string, or nil when they are not valid UTF-8.
    init?(validUTF8 bytes: UnsafeBufferPointer<UInt8>) {
        // ASCII is valid UTF-8, and decoding it repairs nothing: the same string.
        if bytes.allSatisfy({ $0 < 0x80 }) {
            self = String(decoding: bytes, as: UTF8.self)
            return
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        self = text
    }
}
