import Foundation

/// Completion of one activity over a date range.
public struct AdherenceRow: Sendable, Codable, Equatable {
    public var activityID: String
    public var title: String
    public var category: String
    public var expected: Int
    public var completed: Int
    /// Per local day (yyyy-MM-dd): expected and completed occurrences.
    public var days: [Day]
    public var ratio: Double { expected == 0 ? 0 : Double(completed) / Double(expected) }

    /// Expected and completed occurrences on one local day.
    public struct Day: Sendable, Codable, Equatable {
        public var date: String
        public var expected: Int
        public var completed: Int
    }
}

/// Adherence: which scheduled occurrences have an outcome with at least one live value. A pure function
/// of the activities and outcomes, so the doctor's tools, the patient's tools and the tests agree.
public enum Adherence {
    /// Completion per activity over [from, to), days counted in `timeZone`. An occurrence counts as done
    /// when an outcome for (activity id, occurrence index) holds a live value.
    public static func rows(
        activities: [Activity],
        outcomes: [Outcome],
        from: Date,
        to: Date,
        timeZone: TimeZone = .current
    ) throws(CareModelError) -> [AdherenceRow] {
        var done: Set<OccurrenceKey> = []
        for o in outcomes where !o.liveValues.isEmpty { done.insert(OccurrenceKey(activityID: o.activityID, occurrence: o.occurrence)) }
        let day = DateFormatter()
        day.dateFormat = "yyyy-MM-dd"
        day.timeZone = timeZone
        day.locale = Locale(identifier: "en_US_POSIX")
        var out: [AdherenceRow] = []
        for a in activities {
            let events = try a.schedule.events(from: from, to: to)
            var days: [String: AdherenceRow.Day] = [:]
            var completed = 0
            for e in events {
                let key = day.string(from: e.start)
                let hit = done.contains(OccurrenceKey(activityID: a.id, occurrence: e.occurrence))
                var d = days[key] ?? AdherenceRow.Day(date: key, expected: 0, completed: 0)
                d.expected += 1
                if hit {
                    completed += 1
                    d.completed += 1
                }
                days[key] = d
            }
            out.append(
                AdherenceRow(
                    activityID: a.id,
                    title: a.title,
                    category: a.category,
                    expected: events.count,
                    completed: completed,
                    days: days.values.sorted { $0.date < $1.date }
                )
            )
        }
        return out
    }

    private struct OccurrenceKey: Hashable {
        var activityID: String
        var occurrence: Int
    }
}
