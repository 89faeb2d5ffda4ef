import Foundation
import Testing

@testable import VaultCore

/// Dates in the patient's zone, so expectations read as wall-clock times.
private enum Berlin {
    static let zone = TimeZone(identifier: "Europe/Berlin")!
    static let calendar: Calendar = {
        var c = Calendar(identifier: .gregorian)
        c.timeZone = zone
        return c
    }()

    static func date(_ y: Int, _ m: Int, _ d: Int, _ h: Int = 0, _ min: Int = 0) -> Date {
        calendar.date(from: DateComponents(year: y, month: m, day: d, hour: h, minute: min))!
    }

    static func wallTime(_ date: Date) -> (day: Int, hour: Int, minute: Int) {
        let c = calendar.dateComponents([.day, .hour, .minute], from: date)
        return (c.day!, c.hour!, c.minute!)
    }

    static func weekday(_ date: Date) -> Int { calendar.component(.weekday, from: date) }
}

private func time(_ hour: Int, _ minute: Int = 0) -> DateComponents { DateComponents(hour: hour, minute: minute) }

@Suite("Schedule")
struct ScheduleTests {
    @Test func dailyAtTwoTimesOverAWeek() throws {
        // Given a dose at 08:00 and 20:00 from Monday 4 May 2026
        let schedule = try Schedule.dailyAtTimes(start: Berlin.date(2026, 5, 4), times: [time(8), time(20)], timeZone: Berlin.zone)
        // When the week is queried
        let events = try schedule.events(from: Berlin.date(2026, 5, 4), to: Berlin.date(2026, 5, 11))
        // Then there are 14 events, alternating 08:00 and 20:00, numbered 0...13
        #expect(events.count == 14)
        for (i, event) in events.enumerated() {
            #expect(event.occurrence == i)
            #expect(event.start == Berlin.date(2026, 5, 4 + i / 2, i % 2 == 0 ? 8 : 20))
            #expect(event.elementIndex == i % 2)
            #expect(!event.allDay)
        }
    }

    @Test func weeklyOnMondayWednesdayFriday() throws {
        let schedule = try Schedule.weekly(
            start: Berlin.date(2026, 5, 4),
            weekdays: [6, 2, 4, 2],
            at: time(9, 30),
            timeZone: Berlin.zone,
            duration: 600
        )
        let events = try schedule.events(from: Berlin.date(2026, 5, 1), to: Berlin.date(2026, 5, 18))
        #expect(events.map(\.start) == [4, 6, 8, 11, 13, 15].map { Berlin.date(2026, 5, $0, 9, 30) })
        #expect(events.map { Berlin.weekday($0.start) } == [2, 4, 6, 2, 4, 6])
        #expect(events.allSatisfy { $0.end.timeIntervalSince($0.start) == 600 })
        #expect(schedule.elements.count == 3, "duplicate weekdays are dropped")
        #expect(throws: CareModelError.invalidWeekday(8)) { try Schedule.weekly(start: .now, weekdays: [8], at: time(9), timeZone: Berlin.zone) }
    }

    @Test func everyThreeDays() throws {
        let schedule = try Schedule.everyNDays(3, start: Berlin.date(2026, 1, 1, 6), at: time(7), timeZone: Berlin.zone)
        let events = try schedule.events(from: Berlin.date(2026, 1, 1), to: Berlin.date(2026, 1, 13))
        #expect(events.map(\.start) == [1, 4, 7, 10].map { Berlin.date(2026, 1, $0, 7) })

        // A start after the day's time begins the next day: no event before `start`.
        let late = try Schedule.everyNDays(3, start: Berlin.date(2026, 1, 1, 9), at: time(7), timeZone: Berlin.zone)
        #expect(
            try late.events(from: Berlin.date(2026, 1, 1), to: Berlin.date(2026, 1, 6)).map(\.start)
                == [Berlin.date(2026, 1, 2, 7), Berlin.date(2026, 1, 5, 7)]
        )
    }

    @Test func allDayEventsCoverLocalDaysIncludingTheShortDSTDay() throws {
        // Given an all-day schedule starting mid-afternoon on the Saturday before spring-forward
        let schedule = try Schedule.allDay(start: Berlin.date(2026, 3, 28, 15), timeZone: Berlin.zone)
        // When three days are queried
        let events = try schedule.events(from: Berlin.date(2026, 3, 28), to: Berlin.date(2026, 3, 31))
        // Then each event runs from local midnight to the next; Sunday 29 March is 23 hours long
        #expect(events.map(\.start) == [28, 29, 30].map { Berlin.date(2026, 3, $0) })
        #expect(events.map(\.end) == [29, 30, 31].map { Berlin.date(2026, 3, $0) })
        #expect(events.map { $0.end.timeIntervalSince($0.start) / 3600 } == [24, 23, 24])
        #expect(events.allSatisfy { $0.allDay })
        // A range starting at noon leaves out that day's event (events are selected by start)
        let later = try schedule.events(from: Berlin.date(2026, 3, 28, 12), to: Berlin.date(2026, 3, 31))
        #expect(later.map(\.occurrence) == [1, 2])
        #expect(throws: CareModelError.allDayRequiresDayInterval) {
            try ScheduleElement(start: .now, interval: .hours(2), allDay: true, timeZoneIdentifier: "Europe/Berlin")
        }
    }

    @Test func composedScheduleHasStableOccurrenceIndices() throws {
        // Given three rules, two of which fire at the same instant every other day
        let daily = try Schedule.dailyAtTimes(start: Berlin.date(2026, 5, 4), times: [time(8)], timeZone: Berlin.zone)
        let everyOther = try Schedule.everyNDays(2, start: Berlin.date(2026, 5, 4), at: time(8), timeZone: Berlin.zone)
        let mondays = try Schedule.weekly(start: Berlin.date(2026, 5, 4), weekdays: [2], at: time(12), timeZone: Berlin.zone)
        let schedule = daily + Schedule(composing: [everyOther, mondays])
        #expect(schedule.elements.count == 3)

        // When a wide range is queried
        let wide = try schedule.events(from: Berlin.date(2026, 5, 1), to: Berlin.date(2026, 6, 15))
        #expect(wide.map(\.occurrence) == Array(wide.indices))
        // Then ties go to the earlier element
        #expect(wide.prefix(3).map(\.elementIndex) == [0, 1, 2])
        // And event(occurrence:) agrees with it for every index
        for event in wide {
            #expect(schedule.event(occurrence: event.occurrence) == event)
        }
        // And so does every narrow window, including ones that start inside a run of ties
        for day in 4...40 {
            let from = Berlin.date(2026, 5, day, 8)
            let to = Berlin.date(2026, 5, day + 1, 8)
            for event in try schedule.events(from: from, to: to) {
                #expect(wide[event.occurrence] == event)
            }
        }
        let narrow = try schedule.events(from: Berlin.date(2026, 5, 10), to: Berlin.date(2026, 5, 12))
        #expect(narrow.map(\.occurrence) == Array(narrow.first!.occurrence..<(narrow.first!.occurrence + narrow.count)))
        #expect(schedule.event(occurrence: -1) == nil)
    }

    @Test func farOccurrenceIsFoundWithoutEnumerating() throws {
        let element = try ScheduleElement(start: Berlin.date(2026, 1, 1), interval: .hours(1), timeZoneIdentifier: "Europe/Berlin")
        let schedule = Schedule(elements: [element])
        let event = try #require(schedule.event(occurrence: 10_000_000))
        #expect(event.start == Berlin.date(2026, 1, 1).addingTimeInterval(10_000_000 * 3600))
        let around = try schedule.events(from: event.start.addingTimeInterval(-3600), to: event.start.addingTimeInterval(3601))
        #expect(around.map(\.occurrence) == [9_999_999, 10_000_000, 10_000_001])
    }

    @Test func endDateIsRespected() throws {
        // Given a daily schedule that ends at 08:00 on 7 May, the instant its fourth event would start
        let schedule = try Schedule.dailyAtTimes(
            start: Berlin.date(2026, 5, 4),
            end: Berlin.date(2026, 5, 7, 8),
            times: [time(8)],
            timeZone: Berlin.zone
        )
        // When a long range is queried
        let events = try schedule.events(from: Berlin.date(2026, 1, 1), to: Berlin.date(2027, 1, 1))
        // Then only the events starting before the end exist
        #expect(events.map(\.start) == [4, 5, 6].map { Berlin.date(2026, 5, $0, 8) })
        #expect(schedule.event(occurrence: 2) == events[2])
        #expect(schedule.event(occurrence: 3) == nil)
        #expect(throws: CareModelError.endBeforeStart) {
            try ScheduleElement(start: Berlin.date(2026, 5, 4), end: Berlin.date(2026, 5, 3), interval: .days(1), timeZoneIdentifier: "Europe/Berlin")
        }
    }

    @Test func dailyDoseStaysAtEightLocalAcrossSpringForward() throws {
        let schedule = try Schedule.dailyAtTimes(start: Berlin.date(2026, 3, 26), times: [time(8)], timeZone: Berlin.zone)
        let events = try schedule.events(from: Berlin.date(2026, 3, 26), to: Berlin.date(2026, 4, 1))
        #expect(events.count == 6)
        #expect(events.allSatisfy { Berlin.wallTime($0.start).hour == 8 && Berlin.wallTime($0.start).minute == 0 })
        let gaps = zip(events, events.dropFirst()).map { $1.start.timeIntervalSince($0.start) / 3600 }
        // 28 -> 29 March crosses 02:00 CET -> 03:00 CEST: one hour shorter.
        #expect(gaps == [24, 24, 23, 24, 24])
    }

    @Test func dailyDoseStaysAtEightLocalAcrossFallBack() throws {
        let schedule = try Schedule.dailyAtTimes(start: Berlin.date(2026, 10, 22), times: [time(8)], timeZone: Berlin.zone)
        let events = try schedule.events(from: Berlin.date(2026, 10, 22), to: Berlin.date(2026, 10, 28))
        #expect(events.allSatisfy { Berlin.wallTime($0.start).hour == 8 })
        let gaps = zip(events, events.dropFirst()).map { $1.start.timeIntervalSince($0.start) / 3600 }
        // 24 -> 25 October crosses 03:00 CEST -> 02:00 CET: one hour longer.
        #expect(gaps == [24, 24, 25, 24, 24])
    }

    @Test func hourIntervalStaysAbsoluteAcrossDST() throws {
        // Given every 6 hours from 19:00 CET the evening before spring-forward
        let element = try ScheduleElement(start: Berlin.date(2026, 3, 28, 19), interval: .hours(6), duration: 60, timeZoneIdentifier: "Europe/Berlin")
        let events = try Schedule(elements: [element]).events(from: Berlin.date(2026, 3, 28), to: Berlin.date(2026, 3, 30))
        // Then elapsed time is always 6 hours, so the local hour shifts by one after the change
        #expect(zip(events, events.dropFirst()).allSatisfy { $1.start.timeIntervalSince($0.start) == 6 * 3600 })
        #expect(events.prefix(4).map { Berlin.wallTime($0.start).hour } == [19, 1, 8, 14])
    }

    @Test func unboundedQueryThrowsPastTheLimit() throws {
        let start = Berlin.date(2026, 1, 1)
        let hourly = Schedule(elements: [try ScheduleElement(start: start, interval: .hours(1), timeZoneIdentifier: "Europe/Berlin")])
        // Exactly the limit is fine...
        let limit = Schedule.maxEventsPerCall
        let all = try hourly.events(from: start, to: start.addingTimeInterval(Double(limit) * 3600))
        #expect(all.count == limit)
        #expect(all.last?.occurrence == limit - 1)
        // ...one more is refused, and an endless range is refused before any work
        #expect(throws: CareModelError.tooManyEvents(count: limit + 1, limit: limit)) {
            try hourly.events(from: start, to: start.addingTimeInterval(Double(limit) * 3600 + 1))
        }
        #expect(throws: CareModelError.self) { try hourly.events(from: .distantPast, to: .distantFuture) }
        #expect(throws: CareModelError.invalidRange) { try hourly.events(from: start, to: start.addingTimeInterval(-1)) }
    }

    @Test func zeroOrNegativeIntervalIsRejected() throws {
        #expect(throws: CareModelError.invalidInterval(.days(0))) {
            try ScheduleElement(start: .now, interval: .days(0), timeZoneIdentifier: "Europe/Berlin")
        }
        #expect(throws: CareModelError.invalidInterval(.hours(-2))) {
            try ScheduleElement(start: .now, interval: .hours(-2), timeZoneIdentifier: "Europe/Berlin")
        }
        #expect(throws: CareModelError.invalidInterval(.days(0))) {
            try Schedule.everyNDays(0, start: .now, at: time(8), timeZone: Berlin.zone)
        }
        // A decoded element cannot smuggle a zero step in either
        let json = #"{"unit":"weeks","count":0}"#
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(ScheduleInterval.self, from: Data(json.utf8)) }
        #expect(throws: CareModelError.unknownTimeZone("Mars/Olympus")) {
            try ScheduleElement(start: .now, interval: .days(1), timeZoneIdentifier: "Mars/Olympus")
        }
    }

    @Test func wallTimeInsideTheSpringForwardGapMovesOnlyThatDay() throws {
        // Given a daily 02:30 dose, a time that does not exist in Berlin on 29 March 2026
        let schedule = try Schedule.dailyAtTimes(start: Berlin.date(2026, 3, 27), times: [time(2, 30)], timeZone: Berlin.zone)
        let events = try schedule.events(from: Berlin.date(2026, 3, 27), to: Berlin.date(2026, 4, 1))
        // Then that day's event is pushed past the gap, and the next day is back at 02:30
        #expect(events.map { Berlin.wallTime($0.start).day } == [27, 28, 29, 30, 31])
        #expect(events.map { Berlin.wallTime($0.start).hour } == [2, 2, 3, 2, 2])
        for event in events { #expect(schedule.event(occurrence: event.occurrence) == event) }
    }

    @Test func randomSchedulesAgreeAcrossWindowsAndDirectLookup() throws {
        // A small deterministic generator (xorshift64*), so a failing case can be replayed from its seed.
        struct XorShift: RandomNumberGenerator {
            var state: UInt64
            mutating func next() -> UInt64 {
                state ^= state >> 12
                state ^= state << 25
                state ^= state >> 27
                return state &* 0x2545_F491_4F6C_DD1D
            }
        }
        let zones = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC", "America/Santiago"]
        for seed in UInt64(1)...60 {
            var rng = XorShift(state: seed &* 0x9E37_79B9_7F4A_7C15)
            // Given a random composition of hour, day, week and all-day rules, some ending, in DST-heavy zones
            let origin = Berlin.date(2026, 3, 1).addingTimeInterval(Double(Int.random(in: 0..<86_400 * 30, using: &rng)))
            var elements: [ScheduleElement] = []
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let start = origin.addingTimeInterval(Double(Int.random(in: 0...(86_400 * 10), using: &rng) / 900 * 900))
                let end: Date? = Bool.random(using: &rng) ? start.addingTimeInterval(Double(Int.random(in: 0...(86_400 * 60), using: &rng))) : nil
                let allDay = Int.random(in: 0..<4, using: &rng) == 0
                let interval: ScheduleInterval =
                    switch Int.random(in: 0..<3, using: &rng) {
                    case 0 where !allDay: .hours(Int.random(in: 1...30, using: &rng))
                    case 2: .weeks(Int.random(in: 1...2, using: &rng))
                    default: .days(Int.random(in: 1...3, using: &rng))
                    }
                elements.append(
                    try ScheduleElement(
                        start: start,
                        end: end,
                        interval: interval,
                        allDay: allDay,
                        duration: 900,
                        timeZoneIdentifier: zones.randomElement(using: &rng)!
                    )
                )
            }
            let schedule = Schedule(elements: elements)
            let from = origin.addingTimeInterval(-2 * 86_400)
            let to = origin.addingTimeInterval(86_400 * 90)
            // When the range is read whole and in random windows
            let wide = try schedule.events(from: from, to: to)
            #expect(wide.map(\.occurrence) == Array(wide.indices), "seed \(seed)")
            #expect(zip(wide, wide.dropFirst()).allSatisfy { $0.start < $1.start || ($0.start == $1.start && $0.elementIndex < $1.elementIndex) })
            var pieces: [ScheduleEvent] = []
            var cursor = from
            while cursor < to {
                let next = min(to, cursor.addingTimeInterval(Double(Int.random(in: 1...(86_400 * 7), using: &rng))))
                pieces += try schedule.events(from: cursor, to: next)
                cursor = next
            }
            // Then the windows add up to the whole, and direct lookup agrees with both
            #expect(pieces == wide, "seed \(seed)")
            for _ in 0..<20 where !wide.isEmpty {
                let k = Int.random(in: 0..<wide.count, using: &rng)
                #expect(schedule.event(occurrence: k) == wide[k], "seed \(seed) occurrence \(k)")
            }
        }
    }

    @Test func scheduleJSONRoundTrip() throws {
        let schedule =
            try Schedule.dailyAtTimes(start: Berlin.date(2026, 5, 4), times: [time(8)], timeZone: Berlin.zone)
            + Schedule.allDay(start: Berlin.date(2026, 5, 4), end: Berlin.date(2026, 6, 1), timeZone: Berlin.zone, text: "log mood")
        let data = try JSONEncoder().encode(schedule)
        #expect(try JSONDecoder().decode(Schedule.self, from: data) == schedule)
        #expect(String(decoding: data, as: UTF8.self).contains(#""interval":{"#))
    }
}
