import Foundation
import VaultCrypto

/// One reading inside an outcome (after CareKit's `OCKOutcomeValue`): a number, a text or a yes/no,
/// recorded by one device. Values are the unit of merging: two devices that record readings for the
/// same occurrence offline each keep theirs, because every value has its own random id.
public struct OutcomeValue: Codable, Sendable, Hashable {
    /// The recorded quantity. Encoded as `{"type":"number","number":3.5}`, `{"type":"text","text":"…"}`
    /// or `{"type":"boolean","boolean":true}`, so a reader never has to guess a JSON scalar's meaning.
    public enum Value: Codable, Sendable, Hashable {
        /// A measurement, e.g. a pain score or a glucose reading. Must be finite.
        case number(Double)
        /// Free text, e.g. a symptom description.
        case text(String)
        /// A yes/no answer, e.g. "dose taken".
        case boolean(Bool)

        private enum CodingKeys: String, CodingKey { case type, number, text, boolean }

        /// Decodes the tagged form; an unknown tag is a data error rather than a silent default.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            switch try c.decode(String.self, forKey: .type) {
            case "number": self = .number(try c.decode(Double.self, forKey: .number))
            case "text": self = .text(try c.decode(String.self, forKey: .text))
            case "boolean": self = .boolean(try c.decode(Bool.self, forKey: .boolean))
            case let other:
                throw DecodingError.dataCorruptedError(forKey: .type, in: c, debugDescription: "unknown outcome value type \"\(other)\"")
            }
        }

        /// Encodes the tagged form.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            switch self {
            case let .number(n):
                try c.encode("number", forKey: .type)
                try c.encode(n, forKey: .number)
            case let .text(t):
                try c.encode("text", forKey: .type)
                try c.encode(t, forKey: .text)
            case let .boolean(b):
                try c.encode("boolean", forKey: .type)
                try c.encode(b, forKey: .boolean)
            }
        }
    }

    /// The value's identity across devices: random (a UUID string by default), made by the recording device.
    public var id: String
    /// What was recorded.
    public var value: Value
    /// The unit of a number, e.g. "mg/dL"; nil when it has none.
    public var units: String?
    /// What the value measures, e.g. "systolic"; lets one outcome carry several kinds of reading.
    public var kind: String?
    /// When the device recorded it; the later of two conflicting copies of one id wins a merge.
    public var createdAt: Date

    /// Makes a value. The clock is not read here: the caller passes `createdAt`, which keeps the domain pure.
    public init(id: String = UUID().uuidString, value: Value, units: String? = nil, kind: String? = nil, createdAt: Date) {
        self.id = id
        self.value = value
        self.units = units
        self.kind = kind
        self.createdAt = createdAt
    }

    private enum CodingKeys: String, CodingKey { case id, value, units, kind, createdAt }

    /// Decodes a value, giving absent fields the defaults of Docs/payload-v1.md §5: `createdAt` 1970-01-01
    /// and an id derived from the content (`derivedID`), the same on every device, so copies of the value
    /// still merge as one. `value` stays required.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        value = try c.decode(Value.self, forKey: .value)
        units = try c.decodeIfPresent(String.self, forKey: .units)
        kind = try c.decodeIfPresent(String.self, forKey: .kind)
        createdAt = try c.decodeIfPresent(Date.self, forKey: .createdAt) ?? Date(timeIntervalSince1970: 0)
        id = try c.decodeIfPresent(String.self, forKey: .id) ?? Self.derivedID(value: value, units: units, kind: kind, createdAt: createdAt)
    }

    /// The id of a value stored without one (Docs/payload-v1.md §5): `"h-"` and the hex of the first 16
    /// bytes of BLAKE2b over the canonical encoding of its content. Random ids would differ per reader
    /// and turn one reading into several at the next merge; equal content gives one id, as it should.
    public static func derivedID(value: Value, units: String?, kind: String?, createdAt: Date) -> String {
        let content = Self.content(value: value, units: units, kind: kind, createdAt: createdAt)
        // A 16-byte output is always a valid BLAKE2b length.
        return "h-" + Hex.encode(try! BLAKE2b.hash(content, outputLength: 16))
    }

    /// The canonical bytes of a value's content (Docs/payload-v1.md §5): what a derived id hashes, and what
    /// decides between two copies of one id recorded in the same millisecond (Docs/envelope-v1.md §8.3).
    static func content(value: Value, units: String?, kind: String?, createdAt: Date) -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-value-id-v1")
        switch value {
        case let .number(n):
            w.append(UInt8(1))
            w.append(n.bitPattern)
        case let .text(t):
            w.append(UInt8(2))
            w.append(t)
        case let .boolean(b):
            w.append(UInt8(3))
            w.append(b)
        }
        w.append(units)
        w.append(kind)
        w.append(millis(createdAt))
        return w.bytes
    }

    /// This value's content bytes (`content(value:units:kind:createdAt:)`).
    var content: [UInt8] { Self.content(value: value, units: units, kind: kind, createdAt: createdAt) }

    /// `date` in whole milliseconds since 1970, rounded to the nearest, held within `Int64` (a date a
    /// payload carries is bounded long before; this only keeps the conversion from trapping).
    static func millis(_ date: Date) -> Int64 {
        let ms = (date.timeIntervalSince1970 * 1000).rounded()
        guard ms.isFinite else { return 0 }
        if ms >= 0x1p63 { return .max }
        if ms < -0x1p63 { return .min }
        return Int64(ms)
    }

    /// Checks the id (1-128 characters, no control characters) and that a number is finite: NaN would
    /// break equality and therefore merging, and JSON cannot carry it.
    public func validate() throws(CareModelError) {
        guard !id.isEmpty, id.count <= Activity.maxIDLength, !Activity.containsControlCharacter(id) else {
            throw .invalidValueID
        }
        if case let .number(n) = value, !n.isFinite { throw .nonFiniteNumber }
    }
}

extension OutcomeValue {
    /// The deterministic order used wherever values must be sorted or a conflict decided
    /// (Docs/envelope-v1.md §8.3): by `createdAt` in whole milliseconds, then `id`, then the content bytes
    /// compared as unsigned bytes, which any implementation computes alike (so even two different copies
    /// of one id recorded in the same millisecond are ordered the same way on every device).
    static func canonicallyPrecedes(_ a: OutcomeValue, _ b: OutcomeValue) -> Bool {
        let (ma, mb) = (millis(a.createdAt), millis(b.createdAt))
        if ma != mb { return ma < mb }
        if a.id != b.id { return a.id < b.id }
        return a.content.lexicographicallyPrecedes(b.content)
    }
}
