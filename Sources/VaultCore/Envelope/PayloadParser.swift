import Foundation

/// A direct reader of the payload JSON (Docs/payload-v1.md) for the forms writers produce: a tombstone or an
/// outcome, strings without escapes, plain numbers. Foundation's `JSONDecoder` spends more per outcome than
/// the decryption does (Docs/benchmarks.md §3), most of it in generic container machinery.
///
/// It gives up, returning nil, on anything it does not handle itself: an activity, an escape or a control
/// character in a string, a key it does not know, a key given twice, a `null`, an integer with a fraction or
/// an exponent, a number that is not finite, text that is not UTF-8. The caller then decodes with
/// `JSONDecoder`, which decides. So for every input the result is either exactly what `JSONDecoder` yields
/// or nil, never a different record: `PayloadParserTests` and the payload fuzz target check that.
struct PayloadParser {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var at = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// The payload, or nil when the input is beyond this reader (not necessarily invalid).
    static func decode(_ input: [UInt8]) -> RecordPayload? {
        input.withUnsafeBufferPointer { buffer in
            var parser = PayloadParser(buffer)
            guard let payload = parser.payload() else { return nil }
            parser.skipSpace()
            return parser.at == buffer.count ? payload : nil
        }
    }

    // MARK: The payload's shapes

    private mutating func payload() -> RecordPayload? {
        var type: RecordType?
        var outcome: Outcome?
        var seen: UInt8 = 0
        var first = true
        guard open(Self.braceOpen) else { return nil }
        while let key = nextKey(&first) {
            switch key {
            case "type":
                guard mark(&seen, 1), let s = string(), let t = RecordType(rawValue: s) else { return nil }
                type = t
            case "outcome":
                guard mark(&seen, 2), let o = self.outcome() else { return nil }
                outcome = o
            default:
                return nil
            }
        }
        guard !failed, let type else { return nil }
        var payload = RecordPayload(type: type)
        payload.outcome = outcome
        return payload
    }

    private mutating func outcome() -> Outcome? {
        var activityID: String?
        var occurrence: Int?
        var values: [OutcomeValue] = []
        var removed: Set<String> = []
        var note: String?
        var created: Date?
        var updated: Date?
        var seen: UInt8 = 0
        var first = true
        guard open(Self.braceOpen) else { return nil }
        while let key = nextKey(&first) {
            switch key {
            case "activityID":
                guard mark(&seen, 1), let s = string() else { return nil }
                activityID = s
            case "occurrence":
                guard mark(&seen, 2), let n = integer() else { return nil }
                occurrence = n
            case "values":
                guard mark(&seen, 4), let v = array({ $0.value() }) else { return nil }
                values = v
            case "removedValueIDs":
                guard mark(&seen, 8), let ids = array({ $0.string() }) else { return nil }
                removed = Set(ids)
            case "note":
                guard mark(&seen, 16), let s = string() else { return nil }
                note = s
            case "createdAt":
                guard mark(&seen, 32), let d = date() else { return nil }
                created = d
            case "updatedAt":
                guard mark(&seen, 64), let d = date() else { return nil }
                updated = d
            default:
                return nil
            }
        }
        guard !failed, let activityID, let occurrence else { return nil }
        // The defaults of Outcome.init(from:): each date falls back to the other, both to 1970-01-01.
        let epoch = Date(timeIntervalSince1970: 0)
        return Outcome(
            activityID: activityID,
            occurrence: occurrence,
            values: values,
            removedValueIDs: removed,
            note: note,
            createdAt: created ?? updated ?? epoch,
            updatedAt: updated ?? created ?? epoch
        )
    }

    private mutating func value() -> OutcomeValue? {
        var id: String?
        var value: OutcomeValue.Value?
        var units: String?
        var kind: String?
        var created: Date?
        var seen: UInt8 = 0
        var first = true
        guard open(Self.braceOpen) else { return nil }
        while let key = nextKey(&first) {
            switch key {
            case "id":
                guard mark(&seen, 1), let s = string() else { return nil }
                id = s
            case "value":
                guard mark(&seen, 2), let v = tagged() else { return nil }
                value = v
            case "units":
                guard mark(&seen, 4), let s = string() else { return nil }
                units = s
            case "kind":
                guard mark(&seen, 8), let s = string() else { return nil }
                kind = s
            case "createdAt":
                guard mark(&seen, 16), let d = date() else { return nil }
                created = d
            default:
                return nil
            }
        }
        guard !failed, let value else { return nil }
        // The defaults of OutcomeValue.init(from:).
        let createdAt = created ?? Date(timeIntervalSince1970: 0)
        let resolvedID = id ?? OutcomeValue.derivedID(value: value, units: units, kind: kind, createdAt: createdAt)
        return OutcomeValue(id: resolvedID, value: value, units: units, kind: kind, createdAt: createdAt)
    }

    /// `{"type":"number","number":3.5}` and its text and boolean forms. Every field present is read and
    /// must have its own type; the one the tag names must be there.
    private mutating func tagged() -> OutcomeValue.Value? {
        var tag: String?
        var number: Double?
        var text: String?
        var boolean: Bool?
        var seen: UInt8 = 0
        var first = true
        guard open(Self.braceOpen) else { return nil }
        while let key = nextKey(&first) {
            switch key {
            case "type":
                guard mark(&seen, 1), let s = string() else { return nil }
                tag = s
            case "number":
                guard mark(&seen, 2), let n = double() else { return nil }
                number = n
            case "text":
                guard mark(&seen, 4), let s = string() else { return nil }
                text = s
            case "boolean":
                guard mark(&seen, 8), let b = bool() else { return nil }
                boolean = b
            default:
                return nil
            }
        }
        guard !failed else { return nil }
        switch tag {
        case "number": return number.map { .number($0) }
        case "text": return text.map { .text($0) }
        case "boolean": return boolean.map { .boolean($0) }
        default: return nil
        }
    }

    // MARK: JSON, the subset read here

    private var failed = false

    private static let braceOpen = UInt8(ascii: "{"), braceClose = UInt8(ascii: "}")
    private static let bracketOpen = UInt8(ascii: "["), bracketClose = UInt8(ascii: "]")
    private static let comma = UInt8(ascii: ","), colon = UInt8(ascii: ":"), quote = UInt8(ascii: "\"")
    private static let backslash = UInt8(ascii: "\\"), minus = UInt8(ascii: "-"), dot = UInt8(ascii: ".")
    private static let zero = UInt8(ascii: "0"), nine = UInt8(ascii: "9")

    /// Sets `bit` in `seen`; false when it was set already (a key given twice).
    private func mark(_ seen: inout UInt8, _ bit: UInt8) -> Bool {
        guard seen & bit == 0 else { return false }
        seen |= bit
        return true
    }

    private mutating func skipSpace() {
        while at < bytes.count {
            switch bytes[at] {
            case 0x20, 0x09, 0x0A, 0x0D: at += 1
            default: return
            }
        }
    }

    private mutating func eat(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    private mutating func open(_ byte: UInt8) -> Bool {
        skipSpace()
        return eat(byte)
    }

    /// The next key of the object being read, with its colon consumed; nil at the closing brace, or with
    /// `failed` set when the input is not what this reader follows.
    private mutating func nextKey(_ first: inout Bool) -> String? {
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
    private mutating func string() -> String? {
        guard open(Self.quote) else { return nil }
        let start = at
        while at < bytes.count {
            let byte = bytes[at]
            if byte == Self.quote {
                at += 1
                return String(validating: UnsafeBufferPointer(rebasing: bytes[start..<at - 1]), as: UTF8.self)
            }
            if byte == Self.backslash || byte < 0x20 { return nil }
            at += 1
        }
        return nil
    }

    private mutating func digits() -> Int {
        let start = at
        while at < bytes.count, bytes[at] >= Self.zero, bytes[at] <= Self.nine { at += 1 }
        return at - start
    }

    /// A JSON integer with no fraction or exponent, no leading zero and no minus zero, within `Int`.
    private mutating func integer() -> Int? {
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

    /// A JSON number (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?) that is finite as a Double and is not
    /// rounded to zero from non-zero digits: `JSONDecoder` refuses both as not representable.
    private mutating func double() -> Double? {
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
    private mutating func date() -> Date? {
        double().map { Date(timeIntervalSince1970: $0 / 1000.0) }
    }

    private mutating func bool() -> Bool? {
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

    private mutating func array<T>(_ element: (inout PayloadParser) -> T?) -> [T]? {
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
