import Foundation

extension Calendar {
    /// A Gregorian calendar in `timeZone`: schedules always step in the patient's zone, never the host's.
    static func gregorian(in timeZone: TimeZone) -> Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        return calendar
    }
}

/// One validated element prepared for occurrence arithmetic. Event k's start is computed from the
/// element's first start directly (never by repeated stepping), so it is the same for every query.
struct Timeline {
    let element: ScheduleElement
    let calendar: Calendar
    /// Event 0's start (local midnight of the start day for an all-day element).
    let base: Date
    /// The nominal length of one step, used only to estimate an index before exact correction.
    let nominalStep: TimeInterval
    /// Number of events before `element.end`; `Int.max` without an end.
    private(set) var endCount = Int.max
    /// More days than the supported date range spans (4,000 years): any step past it is `.distantFuture`.
    static let maxDaySteps = 1_500_000

    init(_ element: ScheduleElement) throws(CareModelError) {
        try element.validate()
        self.element = element
        // validate() has just checked the identifier.
        calendar = Calendar.gregorian(in: TimeZone(identifier: element.timeZoneIdentifier)!)
        base = element.allDay ? calendar.startOfDay(for: element.start) : element.start
        switch element.interval {
        case let .hours(n): nominalStep = Double(n) * 3600
        case let .days(n): nominalStep = Double(n) * 86_400
        case let .weeks(n): nominalStep = Double(n) * 7 * 86_400
        }
        if let end = element.end { endCount = firstIndex(atOrAfter: end) }
    }

    /// Event k's start. Strictly increasing in k.
    func start(_ k: Int) -> Date {
        // Checked products: an index from a record (or a huge query) must never trap. A step count that
        // does not fit in Int lies far beyond the supported date range anyway.
        let perStep: Int
        switch element.interval {
        case let .hours(n): return base.addingTimeInterval(Double(k) * Double(n) * 3600)
        case let .days(n): perStep = n
        case let .weeks(n): perStep = n * 7
        }
        let (days, overflow) = k.multipliedReportingOverflow(by: perStep)
        guard !overflow, days <= Timeline.maxDaySteps else { return .distantFuture }
        let stepped = calendar.date(byAdding: .day, value: days, to: base)
        // Indices stay within the supported date range (queries are clamped), where calendars answer;
        // the fallback only keeps this total.
        guard let stepped else { return .distantFuture }
        // An all-day event starts at local midnight even where a DST change skips or repeats midnight.
        return element.allDay ? calendar.startOfDay(for: stepped) : stepped
    }

    /// The smallest k >= 0 whose start is at or after `d` (not limited by the end).
    func firstIndex(atOrAfter d: Date) -> Int {
        guard d > base else { return 0 }
        // Calendar steps differ from the nominal step by at most the zone's offset changes, so the
        // estimate is off by a step or two; the loops make it exact.
        let estimate = (d.timeIntervalSince(base) / nominalStep).rounded(.down)
        var k = Int(min(max(estimate, 0), 1e12))
        while k > 0 && start(k - 1) >= d { k -= 1 }
        while start(k) < d { k += 1 }
        return k
    }

    /// Number of events (within the end) starting strictly before `d`.
    func count(before d: Date) -> Int { min(firstIndex(atOrAfter: d), endCount) }

    /// Number of events (within the end) starting at or before `d`.
    func count(atOrBefore d: Date) -> Int {
        var k = firstIndex(atOrAfter: d)
        if k < endCount && start(k) == d { k += 1 }
        return min(k, endCount)
    }

    /// Event k of this element, with the given indices.
    func event(_ k: Int, elementIndex: Int, occurrence: Int) -> ScheduleEvent {
        let s = start(k)
        let e: Date
        if element.allDay {
            let next = calendar.date(byAdding: .day, value: 1, to: s).map { calendar.startOfDay(for: $0) }
            e = next ?? s.addingTimeInterval(86_400)
        } else {
            e = s.addingTimeInterval(element.duration)
        }
        return ScheduleEvent(
            occurrence: occurrence,
            start: s,
            end: e,
            elementIndex: elementIndex,
            allDay: element.allDay,
            text: element.text,
            targetValues: element.targetValues
        )
    }
}
