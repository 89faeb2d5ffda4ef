import Foundation
import Testing

@testable import VaultCore

/// The direct payload reader against Foundation's `JSONDecoder`: whatever it returns must be exactly what
/// `JSONDecoder` returns for the same bytes; where it is unsure it must return nil and leave the decision
/// to `JSONDecoder`. A reader that returned a different record, or a record for bytes `JSONDecoder`
/// refuses, would let two tools show one signed payload differently.
@Suite("Payload parser")
struct PayloadParserTests {
    /// The property tests' seeded generator, so a failure names an input that can be replayed.
    typealias Generator = SplitMix64

    static let texts = [
        "walk", "Ärztliche Übung", "血压", "🩺 ok", "e\u{301}", "tab\there", "quote\"inside", "back\\slash", "slash/ok",
        "\u{7F}del", "line\u{2028}sep", "", String(repeating: "x", count: 300),
    ]
    static let numbers: [Double] = [
        0, -0.0, 1, -1, 3.5, 0.1, 1e-7, 1e300, -2.5e-300, 123_456_789.123_456_78, Double.pi, Double.leastNonzeroMagnitude, 1.7976931348623157e308,
    ]
    static let millis: [Double] = [0, 1_780_000_000_000, 1_780_000_000_123.456, -86_400_000, 253_402_300_799_999, 0.5]

    static func value(_ g: inout Generator) -> OutcomeValue {
        let v: OutcomeValue.Value
        switch g.below(3) {
        case 0: v = .number(g.pick(numbers))
        case 1: v = .text(g.pick(texts))
        default: v = .boolean(g.below(2) == 0)
        }
        return OutcomeValue(
            id: g.below(4) == 0 ? g.pick(texts) : UUID().uuidString,
            value: v,
            units: g.below(2) == 0 ? nil : g.pick(["mg/dL", "mmHg", "°C"]),
            kind: g.below(2) == 0 ? nil : g.pick(texts),
            createdAt: Date(timeIntervalSince1970: g.pick(millis) / 1000)
        )
    }

    static func payload(_ g: inout Generator) -> [UInt8] {
        if g.below(8) == 0 { return Array(#"{"type":"outcome"}"#.utf8) }
        let outcome = Outcome(
            activityID: g.pick(["walk", "blood-pressure/morning", "Übung", "a\"b"]),
            occurrence: g.pick([0, 1, 41, Outcome.maxOccurrence, 1 << 40, -3]),
            values: (0..<g.below(4)).map { _ in value(&g) },
            removedValueIDs: Set((0..<g.below(3)).map { _ in g.pick(texts) }),
            note: g.below(2) == 0 ? nil : g.pick(texts),
            createdAt: Date(timeIntervalSince1970: g.pick(millis) / 1000),
            updatedAt: Date(timeIntervalSince1970: g.pick(millis) / 1000)
        )
        var payload = RecordPayload(type: .outcome)
        payload.outcome = outcome
        return Array(try! RecordPayload.encoder.encode(payload))
    }

    /// An activity as writers produce it (through the unvalidated initializer, so values no validation
    /// would let through are read too): schedules of several elements, target values, extra fields.
    static func activityPayload(_ g: inout Generator) -> [UInt8] {
        if g.below(10) == 0 { return Array(#"{"type":"activity"}"#.utf8) }
        let units: [(Int) -> ScheduleInterval] = [{ .hours($0) }, { .days($0) }, { .weeks($0) }]
        let elements = (0..<g.below(4)).map { _ in
            ScheduleElement(
                decoded: Date(timeIntervalSince1970: g.pick(millis) / 1000),
                end: g.below(2) == 0 ? nil : Date(timeIntervalSince1970: g.pick(millis) / 1000),
                interval: g.pick(units)(g.pick([1, 2, 7, ScheduleInterval.maxCount])),
                allDay: g.below(2) == 0,
                duration: g.pick([0, 900, 0.5, 86_400, 1e300]),
                text: g.below(2) == 0 ? nil : g.pick(texts),
                targetValues: (0..<g.below(3)).map { _ in value(&g) },
                timeZoneIdentifier: g.pick(["UTC", "Europe/Berlin", "America/New_York", "Nowhere/Else"])
            )
        }
        let info = Dictionary((0..<g.below(4)).map { _ in (g.pick(texts), g.pick(texts)) }, uniquingKeysWith: { a, _ in a })
        let activity = Activity(
            decoded: g.pick(["walk", "act-0000001", "Übung", "a\"b", ""]),
            title: g.pick(texts),
            instructions: g.below(2) == 0 ? nil : g.pick(texts),
            category: g.pick(["interventions", "assessments", "x"]),
            schedule: Schedule(elements: elements),
            targetValues: (0..<g.below(3)).map { _ in value(&g) },
            carePlanID: g.below(2) == 0 ? nil : g.pick(texts),
            userInfo: info,
            createdAt: Date(timeIntervalSince1970: g.pick(millis) / 1000),
            updatedAt: Date(timeIntervalSince1970: g.pick(millis) / 1000)
        )
        var payload = RecordPayload(type: .activity)
        payload.activity = activity
        return Array(try! RecordPayload.encoder.encode(payload))
    }

    /// Nil when the direct reader gave up; else whether it agrees with `JSONDecoder` exactly (the same record,
    /// and the same bytes when both are encoded again, which also tells -0.0 from 0.0).
    static func agrees(_ bytes: [UInt8]) -> Bool? {
        guard let direct = PayloadParser.decode(bytes) else { return nil }
        guard let reference = try? RecordPayload.decodeWithFoundation(bytes) else { return false }
        return direct == reference && (try? RecordPayload.encoder.encode(direct)) == (try? RecordPayload.encoder.encode(reference))
    }

    @Test func whatWritersProduceIsReadDirectlyAndAgrees() {
        var g = Generator(seed: 1)
        var direct = 0
        for _ in 0..<2_000 {
            let bytes = Self.payload(&g)
            let escaped = bytes.contains(UInt8(ascii: "\\"))
            switch Self.agrees(bytes) {
            case true?: direct += 1
            case false?: Issue.record("the direct reader disagrees with JSONDecoder on \(String(decoding: bytes, as: UTF8.self))")
            case nil: #expect(escaped, "the direct reader gave up on \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        // Every payload without an escape (879 of these 2,000) is read directly: the fast path is the common one.
        #expect(direct > 700)
    }

    @Test func activitiesWritersProduceAreReadDirectlyAndAgree() {
        var g = Generator(seed: 3)
        var direct = 0
        for _ in 0..<1_000 {
            let bytes = Self.activityPayload(&g)
            switch Self.agrees(bytes) {
            case true?: direct += 1
            case false?: Issue.record("the direct reader disagrees with JSONDecoder on \(String(decoding: bytes, as: UTF8.self))")
            case nil: #expect(bytes.contains(UInt8(ascii: "\\")), "the direct reader gave up on \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        // An activity has many strings, so most of these hold an escape; those without one are read directly.
        #expect(direct > 150, "\(direct) read directly")
    }

    @Test(arguments: [
        // Read directly: spacing, key order, defaults for absent fields.
        (#" { "type" : "outcome" , "outcome" : { "occurrence" : 2 , "activityID" : "walk" } } "#, true),
        (#"{"outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number","number":-0}}]},"type":"outcome"}"#, true),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"boolean":false,"type":"boolean"}}]}}"#, true),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"updatedAt":1.5e3,"values":[]}}"#, true),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number","number":1E2,"text":"x"}}]}}"#, true),
        // Left to JSONDecoder: escapes, nulls, repeated or unknown keys, activities, integers in other forms.
        (#"{"type":"outcome","outcome":{"activityID":"w\u0041","occurrence":0}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"note":null}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"occurrence":1}}"#, false),
        (#"{"type":"outcome","type":"activity"}"#, false),
        (#"{"type":"outcome","extra":1}"#, false),
        // Activities: defaults for what is absent, and a schedule element with only its required fields.
        (#"{"type":"activity","activity":{"id":"w","title":"W","category":"c"}}"#, true),
        (#"{"type":"activity","activity":{"category":"c","id":"w","schedule":{"elements":[]},"title":"W","userInfo":{}}}"#, true),
        (
            #"{"type":"activity","activity":{"id":"w","title":"W","category":"c","schedule":{"elements":[{"interval":{"count":2,"unit":"days"},"start":0}]}}}"#,
            true
        ),
        // Left to JSONDecoder, which refuses them or decides: a count out of range, another unit, no elements,
        // no interval, a key twice in userInfo (or two keys Swift takes for one), a missing title, a null.
        (
            #"{"type":"activity","activity":{"id":"w","title":"W","category":"c","#
                + #""schedule":{"elements":[{"interval":{"count":0,"unit":"days"},"start":0}]}}}"#,
            false
        ),
        (
            #"{"type":"activity","activity":{"id":"w","title":"W","category":"c","#
                + #""schedule":{"elements":[{"interval":{"count":1,"unit":"months"},"start":0}]}}}"#,
            false
        ),
        (#"{"type":"activity","activity":{"id":"w","title":"W","category":"c","schedule":{}}}"#, false),
        (#"{"type":"activity","activity":{"id":"w","title":"W","category":"c","schedule":{"elements":[{"start":0}]}}}"#, false),
        (#"{"type":"activity","activity":{"id":"w","title":"W","category":"c","userInfo":{"a":"1","a":"2"}}}"#, false),
        (#"{"type":"activity","activity":{"id":"w","title":"W","category":"c","userInfo":{""# + "\u{E9}\":\"1\",\"e\u{301}" + #"":"2"}}}"#, false),
        (#"{"type":"activity","activity":{"id":"w","category":"c"}}"#, false),
        (#"{"type":"activity","activity":{"id":"w","title":"W","category":"c","carePlanID":null}}"#, false),
        (
            #"{"type":"activity","activity":{"id":"w","title":"W","category":"c","#
                + #""schedule":{"elements":[{"interval":{"count":1,"unit":"days"},"start":0,"duration":1e999}]}}}"#,
            false
        ),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":1.0}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":1e2}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":-0}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":9223372036854775808}}"#, false),
        // Refused by both.
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":01}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number","number":1e999}}]}}"#, false),
        // Non-zero digits that round to zero: JSONDecoder calls them not representable.
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number","number":1e-400}}]}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number","number":-1e-400}}]}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"createdAt":2.4703282292062327e-324}}"#, false),
        ("{\"type\":\"outcome\",\"outcome\":{\"activityID\":\"w\",\"occurrence\":0,\"updatedAt\":0.\(String(repeating: "0", count: 400))1}}", false),
        // Zero written with zero digits, and the smallest subnormal, are numbers to both.
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number","number":0.000e-999}}]}}"#, true),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number","number":5e-324}}]}}"#, true),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"number"}}]}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[{"value":{"type":"dose","number":1}}]}}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"values":[1,]}}"#, false),
        (#"{"type":"outcome"} x"#, false),
        (#"{"type":"outcome",}"#, false),
        (#"{"type":"outcome","outcome":{"activityID":"w","occurrence":0,"createdAt":.5}}"#, false),
        (#"{"type":"tombstone"}"#, false),
        ("{\"type\":\"outcome\",\"outcome\":{\"activityID\":\"w\u{1}\",\"occurrence\":0}}", false),
    ])
    func edgesAgreeWithFoundation(json: String, readDirectly: Bool) {
        let bytes = Array(json.utf8)
        let verdict = Self.agrees(bytes)
        #expect(verdict != false, "the direct reader disagrees with JSONDecoder")
        #expect((verdict != nil) == readDirectly)
    }

    @Test func textThatIsNotUTF8IsLeftToFoundation() {
        for bad: [UInt8] in [[0xFF], [0xC3], [0xED, 0xA0, 0x80], [0xC0, 0xAF]] {
            let bytes = Array(#"{"type":"outcome","outcome":{"activityID":""#.utf8) + bad + Array(#"","occurrence":0}}"#.utf8)
            #expect(PayloadParser.decode(bytes) == nil)
        }
    }

    /// Bytes changed, inserted, deleted, repeated and nulled at random in writers' payloads: the direct
    /// reader either gives up or agrees, and it still reads some of them (the mutations reach its paths).
    @Test func mutatedPayloadsNeverGetADifferentRecord() {
        var g = Generator(seed: 7)
        let alphabet = Array(#"{}[],:"\-.0123456789eE+ ntfu"#.utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xA9, 0xFF]
        var direct = 0
        for round in 0..<6_000 {
            var bytes = round % 3 == 2 ? Self.activityPayload(&g) : Self.payload(&g)
            for _ in 0...g.below(3) {
                guard !bytes.isEmpty else { break }
                let at = g.below(bytes.count)
                switch g.below(5) {
                case 0: bytes[at] = g.pick(alphabet)
                case 1: bytes.insert(g.pick(alphabet), at: at)
                case 2: bytes.remove(at: at)
                case 3:
                    let end = min(bytes.count, at + 1 + g.below(24))
                    bytes.insert(contentsOf: bytes[at..<end], at: end)
                default:
                    let end = min(bytes.count, at + 1 + g.below(8))
                    bytes.replaceSubrange(at..<end, with: Array("null".utf8))
                }
            }
            switch Self.agrees(bytes) {
            case true?: direct += 1
            case false?: Issue.record("round \(round): the direct reader disagrees with JSONDecoder on \(bytes)")
            case nil: break
            }
        }
        #expect(direct > 150)
    }
}

extension SplitMix64 {
    fileprivate mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    fileprivate mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
}
