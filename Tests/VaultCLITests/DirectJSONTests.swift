import Foundation
import Testing

@testable import VaultCLI
@testable import VaultCore

/// The direct writer of activities and outcomes against `Output.encoder` (Foundation's `JSONEncoder`):
/// whatever it writes must be that encoder's text byte for byte; where it is unsure it must give up. A
/// writer that wrote other text would make `show --json` print one record two ways.
@Suite("Output: activities and outcomes written directly")
struct DirectJSONTests {
    /// The seeded generator of the fault tests, with the picks these tests make.
    struct Generator {
        var base: SeededGenerator
        init(seed: UInt64) { base = SeededGenerator(seed: seed) }
        mutating func below(_ n: Int) -> Int { Int(base.next() % UInt64(n)) }
        mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
        mutating func maybe<T>(_ items: [T]) -> T? { below(3) == 0 ? nil : pick(items) }
    }

    static let texts = [
        "walk", "Ärztliche Übung", "血压", "🩺 ok", "e\u{301}", "quote\"inside", "back\\slash", "slash/ok", "tab\there",
        "line\u{2028}sep", "unit\u{1F}sep", "\u{7F}del", "", "rtl\u{202E}mark", String(repeating: "x", count: 300),
    ]
    static let numbers: [Double] = [0, -0.0, 1, -1, 900, 3.5, 0.1, 1e14, 999_999_999_999_999, 1e15, 1e16, -2e15, 1e300, .pi]
    static let seconds: [Double] = [0, 1_700_000_000, 1_700_000_000.9, 86_399, 951_782_400, 253_402_300_799, 253_402_300_800, -1, -86_400.5]
    static let keys = ["a", "B", "z", "note", "é", "key two", ""]

    /// Mostly as payloads make them (seconds since 1970); now and then a hair off a whole second in the
    /// reference time the encoder's formatter rounds down from.
    static func date(_ g: inout Generator) -> Date {
        g.below(8) == 0
            ? Date(timeIntervalSinceReferenceDate: g.pick([-1e-10, 1e-10, 0, 700_000_000 - 1e-7]))
            : Date(timeIntervalSince1970: g.pick(seconds))
    }

    static func value(_ g: inout Generator) -> OutcomeValue {
        let v: OutcomeValue.Value
        switch g.below(3) {
        case 0: v = .number(g.pick(numbers))
        case 1: v = .text(g.pick(texts))
        default: v = .boolean(g.below(2) == 0)
        }
        return OutcomeValue(id: g.pick(texts), value: v, units: g.maybe(["mg/dL", "°C"]), kind: g.maybe(texts), createdAt: date(&g))
    }

    static func activity(_ g: inout Generator) -> Activity {
        let units: [(Int) -> ScheduleInterval] = [{ .hours($0) }, { .days($0) }, { .weeks($0) }]
        let elements = (0..<g.below(3)).map { _ in
            ScheduleElement(
                decoded: date(&g),
                end: g.below(2) == 0 ? nil : date(&g),
                interval: g.pick(units)(g.pick([1, 7, 10_000])),
                allDay: g.below(2) == 0,
                duration: g.pick(numbers),
                text: g.maybe(texts),
                targetValues: (0..<g.below(2)).map { _ in value(&g) },
                timeZoneIdentifier: g.pick(["UTC", "Europe/Berlin"])
            )
        }
        return Activity(
            decoded: g.pick(texts),
            title: g.pick(texts),
            instructions: g.maybe(texts),
            category: g.pick(["interventions", "assessments"]),
            schedule: Schedule(elements: elements),
            targetValues: (0..<g.below(3)).map { _ in value(&g) },
            carePlanID: g.maybe(texts),
            userInfo: Dictionary((0..<g.below(4)).map { _ in (g.pick(keys), g.pick(texts)) }, uniquingKeysWith: { a, _ in a }),
            createdAt: date(&g),
            updatedAt: date(&g)
        )
    }

    static func outcome(_ g: inout Generator) -> Outcome {
        Outcome(
            activityID: g.pick(texts),
            occurrence: g.pick([0, 1, 41, Int.max, -3]),
            values: (0..<g.below(4)).map { _ in value(&g) },
            removedValueIDs: Set((0..<g.below(3)).map { _ in g.pick(texts) }),
            note: g.maybe(texts),
            createdAt: date(&g),
            updatedAt: date(&g)
        )
    }

    /// Nil when the writer gave up; else whether its text is the encoder's.
    static func agrees<T: Encodable>(_ value: T, _ direct: [UInt8]?) throws -> Bool? {
        guard let direct else { return nil }
        return direct == Array(try Output.encoder.encode(value))
    }

    @Test func everyActivityAndOutcomeWrittenDirectlyIsTheEncodersText() throws {
        var g = Generator(seed: 11)
        var written = (activities: 0, outcomes: 0)
        for i in 0..<3_000 {
            let a = Self.activity(&g)
            switch try Self.agrees(a, DirectJSON.activity(a)) {
            case true?: written.activities += 1
            case false?: Issue.record("activity \(i): \(String(decoding: DirectJSON.activity(a)!, as: UTF8.self))")
            case nil: break
            }
            let o = Self.outcome(&g)
            switch try Self.agrees(o, DirectJSON.outcome(o)) {
            case true?: written.outcomes += 1
            case false?: Issue.record("outcome \(i): \(String(decoding: DirectJSON.outcome(o)!, as: UTF8.self))")
            case nil: break
            }
        }
        // The generated values hold many that the writer leaves to the encoder; enough are written directly
        // that every branch of it is compared.
        #expect(written.activities > 20 && written.outcomes > 100, "\(written)")
    }

    /// What writers produce (plain text, whole seconds, whole numbers) is written directly, and so is what
    /// the bench's 100,000 activities hold.
    @Test func plainRecordsAreWrittenDirectly() throws {
        let start = Date(timeIntervalSince1970: 1_767_254_400)
        let utc = TimeZone(identifier: "UTC")!
        let activity = try Activity(
            id: "act-0000001",
            title: "Activity 1",
            instructions: String(repeating: "x", count: 300),
            category: "interventions",
            schedule: Schedule.dailyAtTimes(start: start, end: nil, times: [DateComponents(hour: 8, minute: 0)], timeZone: utc),
            userInfo: ["source": "clinic/a"],
            createdAt: start
        )
        let outcome = Outcome(
            activityID: "act-0000001",
            occurrence: 3,
            values: [OutcomeValue(id: "v1", value: .number(120), units: "mmHg", createdAt: start)],
            removedValueIDs: ["v0"],
            note: "after \"lunch\"",
            createdAt: start,
            updatedAt: start
        )
        #expect(try Self.agrees(activity, DirectJSON.activity(activity)) == true)
        #expect(try Self.agrees(outcome, DirectJSON.outcome(outcome)) == true)
    }
}
