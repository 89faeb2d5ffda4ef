import Testing

@testable import VaultCore

@Suite("JSON scanner")
struct JSONScannerTests {
    /// What `string()` must give for the bytes after an opening quote, read one byte at a time: the text
    /// up to the first quote when no backslash or control character comes before it and it is valid
    /// UTF-8, otherwise nothing.
    static func expected(_ body: [UInt8]) -> String? {
        for (i, byte) in body.enumerated() {
            if byte == UInt8(ascii: "\"") { return String(validating: body[..<i], as: UTF8.self) }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
        }
        return nil
    }

    static func scanned(_ body: [UInt8]) -> (text: String?, rest: [UInt8]) {
        let input = [UInt8(ascii: "\"")] + body
        return input.withUnsafeBufferPointer { buffer in
            var scanner = JSONScanner(buffer)
            let text = scanner.string()
            // The run of "x" that follows where the scanner stands.
            var rest: [UInt8] = []
            while !scanner.atEnd(), scanner.eat(UInt8(ascii: "x")) { rest.append(UInt8(ascii: "x")) }
            return (text, rest)
        }
    }

    /// The scanner reads eight bytes at a time: every byte that ends or stops a string (a quote, a
    /// backslash, each control character, and the bytes beside them, 0x1F, 0x20, 0x21, 0x5B, 0x5D, 0x7F,
    /// 0x80, 0xFF) is placed at every offset of strings up to 40 bytes long, over ASCII and multi-byte
    /// text, and the result is held to the byte-at-a-time reading, the bytes after the string included.
    @Test func everyStopByteAtEveryOffsetReadsAsOneByteAtATime() {
        let stops: [UInt8] = [0x22, 0x5C, 0x00, 0x01, 0x09, 0x0A, 0x1F, 0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80, 0xFF, 0xA2]
        let fillers: [[UInt8]] = [Array("a".utf8), Array("é".utf8), Array("✓".utf8)]
        var checked = 0
        for filler in fillers {
            for length in 0...40 {
                let plain = Array((0..<length).flatMap { _ in filler }.prefix(length))
                for at in 0...length {
                    for stop in stops {
                        var body = plain
                        body.insert(stop, at: at)
                        let closed = body + Array("\"xx".utf8)
                        let (text, rest) = Self.scanned(closed)
                        #expect(text == Self.expected(closed), "\(closed)")
                        // The scanner stands just after the closing quote, before "xx".
                        if text != nil, stop != 0x22 { #expect(rest.count == 2) }
                        // Without a closing quote nothing is read.
                        #expect(Self.scanned(body.filter { $0 != 0x22 }).text == nil)
                        checked += 1
                    }
                }
            }
        }
        #expect(checked > 2_000)
    }

    /// Long plain text, ASCII and not, read whole; a long string cut before its quote is refused.
    @Test func longTextReadsWhole() {
        for unit in ["x", "ä", "🩺", "ab\u{7F}"] {
            let text = String(repeating: unit, count: 16_384 / unit.utf8.count)
            #expect(Self.scanned(Array(text.utf8) + [0x22]).text == text)
            #expect(Self.scanned(Array(text.utf8)).text == nil)
            #expect(Self.scanned(Array(text.utf8) + [0x5C, 0x22]).text == nil)
        }
        // Bytes that are not UTF-8 past the first words.
        #expect(Self.scanned(Array(repeating: UInt8(ascii: "y"), count: 33) + [0xC0, 0x80, 0x22]).text == nil)
    }
}
