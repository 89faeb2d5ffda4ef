import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// Numbers that a user typed or a signed record carries, at the edges of what Int and the calendar hold:
/// each is refused with a plain error or answered without trapping.
@Suite("Hostile values in the care model")
struct HostileValuesTests {
    private static let utc = TimeZone(identifier: "UTC")!
    private static let start = Date(unixMillis: 1_767_000_000_000)

    static let schedules: [Schedule] = {
        let s = start
        let at8 = DateComponents(hour: 8, minute: 0)
        return [
            try! Schedule.weekly(start: s, weekdays: [2, 5], at: at8, timeZone: utc),
            try! Schedule.dailyAtTimes(start: s, times: [at8, DateComponents(hour: 20, minute: 0)], timeZone: utc),
            try! Schedule.everyNDays(ScheduleInterval.maxCount, start: s, at: at8, timeZone: utc),
            try! Schedule.allDay(start: s, timeZone: utc),
            Schedule(elements: [try! ScheduleElement(start: s, interval: .hours(1), timeZoneIdentifier: "UTC")]),
            Schedule(elements: [try! ScheduleElement(start: .distantPast, interval: .weeks(ScheduleInterval.maxCount), timeZoneIdentifier: "UTC")]),
        ]
    }()

    @Test(arguments: [Int.max, Int.max - 1, Int.max / 7, Int.max / 7 + 1, Outcome.maxOccurrence + 1, Int.min, -1])
    func anOccurrenceBeyondTheLimitHasNoEventAndNoTrap(occurrence: Int) {
        for schedule in Self.schedules {
            #expect(schedule.event(occurrence: occurrence) == nil)
        }
    }

    @Test func theLargestAcceptedOccurrenceIsAnsweredWithoutTrapping() {
        // An hourly schedule has an event with that index (about 114,000 years on: past the supported range,
        // so none), the others end sooner: all answer.
        for schedule in Self.schedules {
            _ = schedule.event(occurrence: Outcome.maxOccurrence)
            _ = schedule.event(occurrence: 1_000_000)
        }
        let hourly = Self.schedules[4]
        #expect(hourly.event(occurrence: 1_000_000)?.start == Self.start.addingTimeInterval(1_000_000 * 3600))
    }

    @Test func theWholeSupportedRangeIsCountedBeforeAnythingIsBuilt() {
        for schedule in Self.schedules {
            do {
                let events = try schedule.events(from: .distantPast, to: .distantFuture)
                #expect(events.count <= Schedule.maxEventsPerCall)
            } catch let error {
                guard case .tooManyEvents = error else {
                    Issue.record("unexpected \(error)")
                    continue
                }
                #expect(error.description.contains("ask for a shorter range"))
            }
        }
    }

    @Test func outcomesOutsideTheOccurrenceRangeAreRefusedInPlainWords() {
        let big = Outcome(activityID: "walk", occurrence: Int.max, createdAt: Self.start)
        #expect(throws: CareModelError.occurrenceTooLarge(Int.max)) { try big.validate() }
        #expect(throws: CareModelError.negativeOccurrence(-1)) { try Outcome(activityID: "walk", occurrence: -1, createdAt: Self.start).validate() }
        #expect(CareModelError.occurrenceTooLarge(Int.max).description == "occurrence \(Int.max) is too large; at most 1000000000 is allowed")
        // No case describes itself with a Swift name.
        let cases: [CareModelError] = [
            .emptyID, .invalidInterval(.hours(0)), .emptySchedule, .dateOutOfRange, .categoryTooLong(length: 131_000),
            .tooManyEvents(count: 721_050, limit: 100_000), .invalidCategoryCharacter, .unknownTimeZone("Mars/Base"),
        ]
        for c in cases {
            // No camelCase Swift identifier ("invalidInterval", "ScheduleInterval.hours") in the words.
            #expect(c.description.range(of: "[a-z][A-Z]", options: .regularExpression) == nil, "\(c.description)")
            #expect(!c.description.contains("VaultCore"), "\(c.description)")
            #expect(!c.description.contains("Mars"), "the offending text is never echoed")
        }
    }

    @Test func aSignedRecordCarryingValuesNoToolAcceptsIsRefusedOnRead() throws {
        let f = try EnvelopeFixture()
        var header = f.header
        header.recordType = .outcome
        header.recordID = RecordID.make(type: .outcome, activityID: "walk", occurrence: Int.max, key: f.patient.recordIDKey)
        // The owner's own key signs it: only the reader's checks stand in the way.
        let outcome = Outcome(
            activityID: "walk",
            occurrence: Int.max,
            values: [OutcomeValue(value: .boolean(true), createdAt: Self.start)],
            createdAt: Self.start
        )
        let env = try Envelope.seal(record: .outcome(outcome), type: .outcome, header: header, key: f.tresor.currentKey, author: f.patient.signing)
        #expect(throws: EnvelopeError.malformedPayload(CareModelError.occurrenceTooLarge(Int.max).description)) {
            try env.openRecord(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey, expecting: f.context)
        }
        // An activity whose schedule steps by zero hours (encoded by hand: the model refuses to build one).
        let json =
            #"{"type":"activity","activity":{"id":"walk","title":"Walk","category":"interventions","createdAt":0,"#
            + #""schedule":{"elements":[{"start":0,"interval":{"unit":"hours","count":0},"allDay":false,"duration":0,"#
            + #""targetValues":[],"timeZoneIdentifier":"UTC"}]},"targetValues":[]}}"#
        let zero = try Envelope.seal(payload: Array(json.utf8), header: f.header, key: f.tresor.currentKey, author: f.patient.signing)
        #expect(throws: EnvelopeError.self) {
            try zero.openRecord(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey, expecting: f.context)
        }
    }

    /// The byte-wise control check agrees with Unicode's general category Cc on every scalar, alone and
    /// between other characters (a two-byte C1 control after ASCII and before a multi-byte scalar).
    @Test func controlCharactersAreExactlyCategoryCc() {
        var disagreements: [UInt32] = []
        for value in UInt32(0)...0x10FFFF {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let expected = scalar.properties.generalCategory == .control
            let alone = String(Character(scalar))
            if Activity.containsControlCharacter(alone) != expected || Activity.containsControlCharacter("a\(alone)é") != expected {
                disagreements.append(value)
            }
        }
        #expect(disagreements.isEmpty, "disagree with Cc at \(disagreements.prefix(10).map { String($0, radix: 16) })")
        #expect(!Activity.containsControlCharacter("Ä¿ç\u{A0}\u{2028}"))
        #expect(Activity.containsControlCharacter("Ä\u{85}"))
    }
}
