import Foundation

extension ScheduleElement {
    /// The time zone of an element stored without one (Docs/payload-v1.md §3).
    public static let defaultTimeZoneIdentifier = "UTC"

    private enum Keys: String, CodingKey {
        case start, end, interval, allDay, duration, text, targetValues, timeZoneIdentifier
    }

    /// An element as decoding gives it, not validated: for the direct payload reader (`PayloadParser`),
    /// which must give what `init(from:)` gives.
    init(
        decoded start: Date,
        end: Date?,
        interval: ScheduleInterval,
        allDay: Bool,
        duration: TimeInterval,
        text: String?,
        targetValues: [OutcomeValue],
        timeZoneIdentifier: String
    ) {
        self.start = start
        self.end = end
        self.interval = interval
        self.allDay = allDay
        self.duration = duration
        self.text = text
        self.targetValues = targetValues
        self.timeZoneIdentifier = timeZoneIdentifier
    }

    /// Decodes an element, giving absent fields the defaults of Docs/payload-v1.md §3: not all-day, a
    /// duration of 0, no target values, time zone UTC. `start` and `interval` stay required. Validation
    /// is separate (`validate()`), as for every decoded care value.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        start = try c.decode(Date.self, forKey: .start)
        end = try c.decodeIfPresent(Date.self, forKey: .end)
        interval = try c.decode(ScheduleInterval.self, forKey: .interval)
        allDay = try c.decodeIfPresent(Bool.self, forKey: .allDay) ?? false
        duration = try c.decodeIfPresent(TimeInterval.self, forKey: .duration) ?? 0
        text = try c.decodeIfPresent(String.self, forKey: .text)
        targetValues = try c.decodeIfPresent([OutcomeValue].self, forKey: .targetValues) ?? []
        timeZoneIdentifier = try c.decodeIfPresent(String.self, forKey: .timeZoneIdentifier) ?? Self.defaultTimeZoneIdentifier
    }
}
