import Foundation

/// A reader of the JSON subset the direct decoders follow (`PayloadParser`, the push answer): objects,
/// arrays, strings without escapes or control characters (as valid UTF-8), plain integers, finite numbers,
/// booleans. Anything else (an escape, a `null`, a number it cannot read exactly as `JSONDecoder` would)
/// makes a method return nil, and the decoder using it gives up, leaving the input to `JSONDecoder`.
public struct JSONScanner {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var at = 0

    /// A scanner at the start of `bytes`, which must outlive it.
    public init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// At an object's opening brace: consumes it (and the whitespace before it).
    public mutating func openObject() -> Bool { open(Self.braceOpen) }

    /// Whether only whitespace is left.
    public mutating func atEnd() -> Bool {
        skipSpace()
        return at == bytes.count
    }

    /// Set when the input is not what this reader follows.
    public private(set) var failed = false

    static let braceOpen = UInt8(ascii: "{"), braceClose = UInt8(ascii: "}")
    static let bracketOpen = UInt8(ascii: "["), bracketClose = UInt8(ascii: "]")
    static let comma = UInt8(ascii: ","), colon = UInt8(ascii: ":"), quote = UInt8(ascii: "\"")
    static let backslash = UInt8(ascii: "\\"), minus = UInt8(ascii: "-"), dot = UInt8(ascii: ".")
    static let zero = UInt8(ascii: "0"), nine = UInt8(ascii: "9")

    /// Sets `bit` in `seen`; false when it was set already (a key given twice): callers keep one bit per key.
    public func mark<Bits: FixedWidthInteger>(_ seen: inout Bits, _ bit: Bits) -> Bool {
        guard seen & bit == 0 else { return false }
        seen |= bit
        return true
    }

    public mutating func skipSpace() {
        while at < bytes.count {
            switch bytes[at] {
            case 0x20, 0x09, 0x0A, 0x0D: at += 1
            default: return
            }
        }
    }

    public mutating func eat(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    public mutating func open(_ byte: UInt8) -> Bool {
        skipSpace()
        return eat(byte)
    }

    /// The next key of the object being read, with its colon consumed; nil at the closing brace, or with
    /// `failed` set when the input is not what this reader follows.
    public mutating func nextKey(_ first: inout Bool) -> String? {
        skipSpace()
        if eat(Self.braceClose) { return nil }
        if first {
            first = false
        } else {
            guard eat(Self.comma) else {
                failed = true
                return nil
            }
        }
        guard let key = string(), open(Self.colon) else {
            failed = true
            return nil
        }
        return key
    }

    /// A string without escapes or control characters, as valid UTF-8.
    public mutating func string() -> String? {
        guard open(Self.quote) else { return nil }
        let start = at
        // Eight bytes at a time while none of them ends the string or stops this reader (a quote, a
        // backslash, a control character); the OR of every byte read says whether the text is ASCII.
        var bits = skipPlain()
        while at < bytes.count {
            let byte = bytes[at]
            if byte == Self.quote {
                at += 1
                let text = UnsafeBufferPointer(rebasing: bytes[start..<at - 1])
                // ASCII is valid UTF-8, read as it is; anything else is validated.
                return bits & 0x80 == 0 ? String(decoding: text, as: UTF8.self) : String(validUTF8: text)
            }
            if byte == Self.backslash || byte < 0x20 { return nil }
            bits |= UInt64(byte)
            at += 1
        }
        return nil
    }

    /// Moves past whole words of eight bytes holding no quote, backslash or byte below 0x20 (a word test
    /// that is exact: it finds such a byte whenever there is one); returns the OR of the bytes passed, its
    /// bytes folded onto the low one.
    private mutating func skipPlain() -> UInt64 {
        guard let base = bytes.baseAddress else { return 0 }
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs = ones &* 0x80
        let quotes = ones &* UInt64(Self.quote)
        let backslashes = ones &* UInt64(Self.backslash)
        var seen: UInt64 = 0
        while bytes.count - at >= 8 {
            let word = UnsafeRawPointer(base + at).loadUnaligned(as: UInt64.self)
            let q = word ^ quotes
            let b = word ^ backslashes
            // A byte is zero in q (b) where the word holds a quote (backslash); below 0x20 where it holds
            // a control character: x - 0x01.. (x - 0x20..) borrows into a byte's high bit exactly then.
            let stops = ((q &- ones) & ~q) | ((b &- ones) & ~b) | ((word &- ones &* 0x20) & ~word)
            if stops & highs != 0 { break }
            seen |= word
            at += 8
        }
        return (seen & highs) == 0 ? 0 : 0x80
    }

    private mutating func digits() -> Int {
        let start = at
        while at < bytes.count, bytes[at] >= Self.zero, bytes[at] <= Self.nine { at += 1 }
        return at - start
    }

    /// A JSON integer with no fraction or exponent, no leading zero and no minus zero, within `Int`.
    public mutating func integer() -> Int? {
        skipSpace()
        let negative = eat(Self.minus)
        let digitsStart = at
        let count = digits()
        guard count > 0, count <= 19 else { return nil }
        if bytes[digitsStart] == Self.zero, count > 1 || negative { return nil }
        if at < bytes.count, bytes[at] == Self.dot || bytes[at] | 0x20 == UInt8(ascii: "e") { return nil }
        var value = 0
        for i in digitsStart..<at {
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(Int(bytes[i] - Self.zero))
            guard !o1, !o2 else { return nil }
            value = sum
        }
        return negative ? -value : value
    }

    /// A JSON integer with no sign, fraction or exponent and no leading zero, within `UInt64`.
    public mutating func unsigned() -> UInt64? {
        skipSpace()
        let digitsStart = at
        let count = digits()
        guard count > 0, count <= 20 else { return nil }
        if bytes[digitsStart] == Self.zero, count > 1 { return nil }
        if at < bytes.count, bytes[at] == Self.dot || bytes[at] | 0x20 == UInt8(ascii: "e") { return nil }
        var value: UInt64 = 0
        for i in digitsStart..<at {
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(bytes[i] - Self.zero))
            guard !o1, !o2 else { return nil }
            value = sum
        }
        return value
    }

    /// A JSON number (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?) that is finite as a Double and is not
    /// rounded to zero from non-zero digits: `JSONDecoder` refuses both as not representable.
    public mutating func double() -> Double? {
        skipSpace()
        let start = at
        _ = eat(Self.minus)
        let intStart = at
        let intCount = digits()
        guard intCount > 0, bytes[intStart] != Self.zero || intCount == 1 else { return nil }
        var mantissaEnd = at
        if eat(Self.dot) {
            guard digits() > 0 else { return nil }
            mantissaEnd = at
        }
        if at < bytes.count, bytes[at] | 0x20 == UInt8(ascii: "e") {
            at += 1
            if at < bytes.count, bytes[at] == Self.minus || bytes[at] == UInt8(ascii: "+") { at += 1 }
            guard digits() > 0 else { return nil }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { return nil }
        if value == 0, bytes[intStart..<mantissaEnd].contains(where: { $0 > Self.zero && $0 <= Self.nine }) { return nil }
        return value
    }

    /// Milliseconds since 1970, as `JSONDecoder.DateDecodingStrategy.millisecondsSince1970` reads them.
    public mutating func date() -> Date? {
        double().map { Date(timeIntervalSince1970: $0 / 1000.0) }
    }

    public mutating func bool() -> Bool? {
        skipSpace()
        if word("true") { return true }
        if word("false") { return false }
        return nil
    }

    private mutating func word(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard at + count <= bytes.count, memcmp(bytes.baseAddress! + at, word.utf8Start, count) == 0 else { return false }
        at += count
        return true
    }

    public mutating func array<T>(_ element: (inout JSONScanner) -> T?) -> [T]? {
        guard open(Self.bracketOpen) else { return nil }
        var items: [T] = []
        skipSpace()
        if eat(Self.bracketClose) { return items }
        while true {
            guard let item = element(&self) else { return nil }
            items.append(item)
            skipSpace()
            if eat(Self.bracketClose) { return items }
            guard eat(Self.comma) else { return nil }
        }
    }
}
