import Foundation

/// How far apart an element's events are. Day and week steps are calendar steps in the element's time
/// zone (a daily 08:00 dose stays at 08:00 local time across daylight-saving changes); hour steps are
/// absolute (every 6 hours means 6 elapsed hours, whatever the wall clock does).
/// Encoded as `{"unit":"days","count":3}`.
public enum ScheduleInterval: Codable, Sendable, Hashable {
    /// Every n elapsed hours.
    case hours(Int)
    /// Every n calendar days, at the same local wall time.
    case days(Int)
    /// Every n calendar weeks, at the same local wall time.
    case weeks(Int)

    /// The largest accepted count, whatever the unit: bounds the arithmetic, and no care plan needs more.
    public static let maxCount = 10_000

    /// The count, whatever the unit.
    public var count: Int {
        switch self {
        case let .hours(n), let .days(n), let .weeks(n): return n
        }
    }

    /// Checks 1 <= count <= `maxCount`; a zero step would repeat one instant forever.
    public func validate() throws(CareModelError) {
        guard count >= 1, count <= Self.maxCount else { throw .invalidInterval(self) }
    }

    private enum CodingKeys: String, CodingKey { case unit, count }

    /// `count` steps of the unit named `unit` ("hours", "days" or "weeks"), not validated; nil for another unit.
    static func named(_ unit: String, count: Int) -> ScheduleInterval? {
        switch unit {
        case "hours": .hours(count)
        case "days": .days(count)
        case "weeks": .weeks(count)
        default: nil
        }
    }

    /// Decodes `{"unit":…,"count":…}` and rejects a count out of range.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let n = try c.decode(Int.self, forKey: .count)
        let unit = try c.decode(String.self, forKey: .unit)
        guard let interval = Self.named(unit, count: n) else {
            throw DecodingError.dataCorruptedError(forKey: .unit, in: c, debugDescription: "unknown interval unit \"\(unit)\"")
        }
        self = interval
        do { try validate() } catch {
            throw DecodingError.dataCorruptedError(forKey: .count, in: c, debugDescription: "interval count \(n) out of range 1...\(Self.maxCount)")
        }
    }

    /// Encodes `{"unit":…,"count":…}`.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .hours: try c.encode("hours", forKey: .unit)
        case .days: try c.encode("days", forKey: .unit)
        case .weeks: try c.encode("weeks", forKey: .unit)
        }
        try c.encode(count, forKey: .count)
    }
}

/// One repeating rule of a schedule (after CareKit's `OCKScheduleElement`): events at `start`, then every
/// `interval`, until before `end` (or forever).
public struct ScheduleElement: Codable, Sendable, Hashable {
    /// The first event's start. For an all-day element, the first event is the whole local day containing it.
    public var start: Date
    /// Events start strictly before this date; nil repeats forever.
    public var end: Date?
    /// The step between events.
    public var interval: ScheduleInterval
    /// True when each event is a whole local day (from local midnight to the next).
    public var allDay: Bool
    /// How long each event lasts, in seconds; ignored for all-day events.
    public var duration: TimeInterval
    /// Text to show with each event, e.g. "with food".
    public var text: String?
    /// What a complete outcome for an event looks like.
    public var targetValues: [OutcomeValue]
    /// The patient's time zone (e.g. "Europe/Berlin"): day and week steps are taken in its wall time.
    public var timeZoneIdentifier: String

    /// Makes a validated element.
    public init(
        start: Date,
        end: Date? = nil,
        interval: ScheduleInterval,
        allDay: Bool = false,
        duration: TimeInterval = 0,
        text: String? = nil,
        targetValues: [OutcomeValue] = [],
        timeZoneIdentifier: String
    ) throws(CareModelError) {
        self.init(
            decoded: start,
            end: end,
            interval: interval,
            allDay: allDay,
            duration: duration,
            text: text,
            targetValues: targetValues,
            timeZoneIdentifier: timeZoneIdentifier
        )
        try validate()
    }

    /// Checks the interval, the dates, the duration, the time zone and the target values.
    public func validate() throws(CareModelError) {
        try interval.validate()
        if allDay, case .hours = interval { throw .allDayRequiresDayInterval }
        guard Schedule.isSupported(start) else { throw .dateOutOfRange }
        if let end {
            guard Schedule.isSupported(end) else { throw .dateOutOfRange }
            guard end >= start else { throw .endBeforeStart }
        }
        guard duration.isFinite, duration >= 0 else { throw .invalidDuration }
        guard TimeZone(identifier: timeZoneIdentifier) != nil else { throw .unknownTimeZone(timeZoneIdentifier) }
        for value in targetValues { try value.validate() }
    }
}

/// One computed occurrence of a schedule.
public struct ScheduleEvent: Codable, Sendable, Hashable {
    /// The stable index of this event, counted from the schedule's first event in merged start order
    /// (ties broken by element order). The same event has the same index whatever range was queried;
    /// it is the `occurrence` of the outcome recorded for it.
    public var occurrence: Int
    /// When the event starts (local midnight for an all-day event).
    public var start: Date
    /// When it ends (`start + duration`, or the next local midnight for an all-day event).
    public var end: Date
    /// The index of the schedule element that produced it.
    public var elementIndex: Int
    /// True for a whole-day event.
    public var allDay: Bool
    /// The element's text.
    public var text: String?
    /// The element's target values.
    public var targetValues: [OutcomeValue]
}

/// When an activity is due (after CareKit's `OCKSchedule`): a list of repeating elements whose events are
/// merged into one sequence with stable occurrence indices.
public struct Schedule: Codable, Sendable, Hashable {
    /// The most events one `events(from:to:)` call returns. A larger query throws
    /// `CareModelError.tooManyEvents` before any event is built, so an endless element and a huge range
    /// cannot make a caller (or a server-side renderer) do unbounded work. Ask for smaller pages instead.
    public static let maxEventsPerCall = 100_000

    /// The repeating rules; their order breaks ties between events that start at the same instant.
    public var elements: [ScheduleElement]

    /// A schedule of the given elements.
    public init(elements: [ScheduleElement]) {
        self.elements = elements
    }

    /// One schedule holding the elements of all `schedules`, in order.
    public init(composing schedules: [Schedule]) {
        self.elements = schedules.flatMap(\.elements)
    }

    /// Composes two schedules: the elements of `lhs`, then those of `rhs`.
    public static func + (lhs: Schedule, rhs: Schedule) -> Schedule {
        Schedule(composing: [lhs, rhs])
    }

    /// Checks every element.
    public func validate() throws(CareModelError) {
        for element in elements { try element.validate() }
    }

    // MARK: Builders

    /// Every day at each of `times` (hour and minute, optionally second) local time, from the first such
    /// time at or after `start`. One element per time, in the order given.
    public static func dailyAtTimes(
        start: Date,
        end: Date? = nil,
        times: [DateComponents],
        timeZone: TimeZone,
        duration: TimeInterval = 0,
        text: String? = nil,
        targetValues: [OutcomeValue] = []
    ) throws(CareModelError) -> Schedule {
        guard !times.isEmpty else { throw .emptySchedule }
        let details = ElementDetails(end: end, timeZone: timeZone, duration: duration, text: text, targetValues: targetValues)
        return Schedule(elements: try times.map { time throws(CareModelError) in try details.element(.days(1), from: start, at: time) })
    }

    /// Every week on each of `weekdays` (1 = Sunday ... 7 = Saturday) at `time` local time, from the first
    /// such time at or after `start`. One element per weekday, in weekday order (duplicates dropped).
    public static func weekly(
        start: Date,
        end: Date? = nil,
        weekdays: [Int],
        at time: DateComponents,
        timeZone: TimeZone,
        duration: TimeInterval = 0,
        text: String? = nil,
        targetValues: [OutcomeValue] = []
    ) throws(CareModelError) -> Schedule {
        guard !weekdays.isEmpty else { throw .emptySchedule }
        for day in weekdays where !(1...7).contains(day) { throw .invalidWeekday(day) }
        let details = ElementDetails(end: end, timeZone: timeZone, duration: duration, text: text, targetValues: targetValues)
        return Schedule(
            elements: try Set(weekdays).sorted().map { day throws(CareModelError) in
                try details.element(.weeks(1), from: start, at: time, weekday: day)
            }
        )
    }

    /// Every `n` days at `time` local time, from the first such time at or after `start`.
    public static func everyNDays(
        _ n: Int,
        start: Date,
        end: Date? = nil,
        at time: DateComponents,
        timeZone: TimeZone,
        duration: TimeInterval = 0,
        text: String? = nil,
        targetValues: [OutcomeValue] = []
    ) throws(CareModelError) -> Schedule {
        try ScheduleInterval.days(n).validate()
        let details = ElementDetails(end: end, timeZone: timeZone, duration: duration, text: text, targetValues: targetValues)
        return Schedule(elements: [try details.element(.days(n), from: start, at: time)])
    }

    /// One all-day event per local day, starting with the day that contains `start`.
    public static func allDay(
        start: Date,
        end: Date? = nil,
        timeZone: TimeZone,
        text: String? = nil,
        targetValues: [OutcomeValue] = []
    ) throws(CareModelError) -> Schedule {
        let details = ElementDetails(end: end, timeZone: timeZone, duration: 0, text: text, targetValues: targetValues)
        return Schedule(elements: [try details.element(.days(1), start: start, allDay: true)])
    }

    // MARK: Occurrences

    /// The events whose start lies in `from ..< to`, in merged order (by start, ties by element index),
    /// each with its stable occurrence index. Dates beyond `Date.distantPast ... Date.distantFuture` are
    /// clamped to it. Throws `tooManyEvents` when the range holds more than `maxEventsPerCall` events
    /// (nothing is built in that case), `invalidRange` when `from > to`, or the first failed element check.
    public func events(from: Date, to: Date) throws(CareModelError) -> [ScheduleEvent] {
        guard !from.timeIntervalSinceReferenceDate.isNaN, !to.timeIntervalSinceReferenceDate.isNaN, from <= to else { throw .invalidRange }
        let lower = Schedule.clamp(from)
        let upper = Schedule.clamp(to)
        let timelines = try elements.map { e throws(CareModelError) in try Timeline(e) }
        // Counting first is arithmetic plus a few calendar steps per element, so the guard costs nothing.
        var bounds: [(lo: Int, hi: Int)] = []
        var total = 0
        var firstOccurrence = 0
        for t in timelines {
            let lo = t.count(before: lower)
            let hi = t.count(before: upper)
            bounds.append((lo, hi))
            total += hi - lo
            firstOccurrence += lo
        }
        guard total <= Schedule.maxEventsPerCall else { throw .tooManyEvents(count: total, limit: Schedule.maxEventsPerCall) }

        var events: [ScheduleEvent] = []
        events.reserveCapacity(total)
        for (i, t) in timelines.enumerated() where bounds[i].hi > bounds[i].lo {
            for k in bounds[i].lo..<bounds[i].hi { events.append(t.event(k, elementIndex: i, occurrence: 0)) }
        }
        events.sort { $0.start != $1.start ? $0.start < $1.start : $0.elementIndex < $1.elementIndex }
        // Events starting in [from, to) are a contiguous run of the global order, and exactly the events
        // before `from` precede it, so the run's first index is the number of those.
        for i in events.indices { events[i].occurrence = firstOccurrence + i }
        return events
    }

    /// The event with occurrence index `occurrence`, or nil when there is none (a negative index, past the
    /// last event of a bounded schedule, or an invalid schedule). Costs O(elements x log(occurrence)).
    public func event(occurrence: Int) -> ScheduleEvent? {
        guard occurrence >= 0, let timelines = try? elements.map({ e throws(CareModelError) in try Timeline(e) }) else { return nil }
        // The global index of element i's j-th event grows strictly with j, so binary-search each element.
        func globalIndex(_ i: Int, _ j: Int) -> Int {
            let s = timelines[i].start(j)
            var index = j
            for (m, t) in timelines.enumerated() where m != i {
                index += m < i ? t.count(atOrBefore: s) : t.count(before: s)
            }
            return index
        }
        // No element has more events than the supported date range holds, nor than `Outcome.maxOccurrence`:
        // bounding the search there keeps every index arithmetic small, whatever index a record carries.
        guard occurrence <= Outcome.maxOccurrence else { return nil }
        for (i, t) in timelines.enumerated() {
            var lo = 0
            var hi = min(occurrence, t.endCount - 1, t.count(before: .distantFuture))
            while lo <= hi {
                let mid = lo + (hi - lo) / 2
                let g = globalIndex(i, mid)
                if g == occurrence { return t.event(mid, elementIndex: i, occurrence: occurrence) }
                if g < occurrence { lo = mid + 1 } else { hi = mid - 1 }
            }
        }
        return nil
    }

    // MARK: Helpers

    /// True for a finite date within `Date.distantPast ... Date.distantFuture`, the range calendars handle.
    static func isSupported(_ d: Date) -> Bool {
        d.timeIntervalSinceReferenceDate.isFinite && d >= .distantPast && d <= .distantFuture
    }

    static func clamp(_ d: Date) -> Date { min(max(d, .distantPast), .distantFuture) }

    /// The first instant at or after `start` whose local wall time is `time` (and whose weekday is
    /// `weekday`, if given), in `timeZone`.
    static func firstWallTime(onOrAfter start: Date, time: DateComponents, weekday: Int?, timeZone: TimeZone) throws(CareModelError) -> Date {
        guard let hour = time.hour, (0...23).contains(hour) else { throw .invalidTimeOfDay }
        let minute = time.minute ?? 0
        let second = time.second ?? 0
        guard (0...59).contains(minute), (0...59).contains(second) else { throw .invalidTimeOfDay }
        guard isSupported(start) else { throw .dateOutOfRange }
        let calendar = Calendar.gregorian(in: timeZone)
        var day = calendar.startOfDay(for: start)
        // Today may be too late and the weekday may be up to six days away: eight days always suffice.
        for _ in 0..<8 {
            if weekday == nil || calendar.component(.weekday, from: day) == weekday,
                let candidate = calendar.date(bySettingHour: hour, minute: minute, second: second, of: day), candidate >= start
            {
                return candidate
            }
            guard let next = calendar.date(byAdding: .day, value: 1, to: day) else { throw .dateOutOfRange }
            day = calendar.startOfDay(for: next)
        }
        throw .dateOutOfRange
    }
}

/// What every builder gives each element it makes: the end, time zone, duration, text and target values
/// the caller passed, so the builders differ only in their intervals and first events.
private struct ElementDetails {
    var end: Date?
    var timeZone: TimeZone
    var duration: TimeInterval
    var text: String?
    var targetValues: [OutcomeValue]

    /// An element repeating every `interval` from `start`.
    func element(_ interval: ScheduleInterval, start: Date, allDay: Bool = false) throws(CareModelError) -> ScheduleElement {
        try ScheduleElement(
            start: start,
            end: end,
            interval: interval,
            allDay: allDay,
            duration: duration,
            text: text,
            targetValues: targetValues,
            timeZoneIdentifier: timeZone.identifier
        )
    }

    /// An element repeating every `interval` from the first local wall time `time` (on `weekday`, if given)
    /// at or after `start`.
    func element(
        _ interval: ScheduleInterval,
        from start: Date,
        at time: DateComponents,
        weekday: Int? = nil
    ) throws(CareModelError)
        -> ScheduleElement
    {
        try element(interval, start: Schedule.firstWallTime(onOrAfter: start, time: time, weekday: weekday, timeZone: timeZone))
    }
}
