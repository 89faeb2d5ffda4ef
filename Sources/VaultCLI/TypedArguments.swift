import ArgumentParser
import Foundation

/// `--timeout SECONDS`: a number of seconds from 0.1 to 86400, the time one server request may take with
/// its retries (Docs/design.md §7). Any other value is refused by the parser (exit 64).
public struct RequestTimeout: ExpressibleByArgument, Sendable, Equatable {
    /// The seconds accepted.
    public static let seconds: ClosedRange<Double> = 0.1...86_400
    public let duration: Duration

    public init?(argument: String) {
        guard let seconds = Double(argument.trimmingCharacters(in: .whitespaces)), Self.seconds.contains(seconds) else { return nil }
        duration = .milliseconds(Int64((seconds * 1_000).rounded()))
    }
}

/// A day as people type it: `YYYY-MM-DD` (a year from 0001 to 9999), `today`, `yesterday` or `tomorrow`.
/// Any other value is refused by the parser (exit 64); which midnight it means depends on a time zone,
/// given when the day is used (an activity's schedule has its own).
public struct Day: ExpressibleByArgument, Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        /// Days from today.
        case relative(Int)
        case date(year: Int, month: Int, day: Int)
    }

    let kind: Kind

    public static let today = Day(kind: .relative(0))

    init(kind: Kind) { self.kind = kind }

    public init?(argument text: String) {
        switch text.lowercased() {
        case "today": kind = .relative(0)
        case "yesterday": kind = .relative(-1)
        case "tomorrow": kind = .relative(1)
        default:
            // Exactly three groups of digits: splitting on '-' alone would read "-0001-01-01" as year 1.
            let groups = text.split(separator: "-", omittingEmptySubsequences: false)
            let parts = groups.compactMap { g in
                g.allSatisfy(\.isASCII) && g.allSatisfy(\.isNumber) && (1...4).contains(g.count) ? Int(g) : nil
            }
            guard groups.count == 3, parts.count == 3, parts[0] >= 1 else { return nil }
            var cal = Calendar(identifier: .gregorian)
            cal.timeZone = TimeZone(identifier: "UTC")!
            guard let d = cal.date(from: DateComponents(year: parts[0], month: parts[1], day: parts[2])),
                cal.component(.day, from: d) == parts[2], cal.component(.month, from: d) == parts[1]
            else { return nil }
            kind = .date(year: parts[0], month: parts[1], day: parts[2])
        }
    }

    /// The day's local midnight in `timeZone`.
    public func start(in timeZone: TimeZone = .current, now: Date = Date()) -> Date {
        var cal = Calendar(identifier: .gregorian)
        cal.timeZone = timeZone
        switch kind {
        case let .relative(days):
            let today = cal.startOfDay(for: now)
            return cal.date(byAdding: .day, value: days, to: today) ?? today
        case let .date(year, month, day):
            // A valid day (checked when parsed) has a midnight, or the first moment after it, in every zone.
            let noon = cal.date(from: DateComponents(year: year, month: month, day: day, hour: 12)) ?? now
            return cal.startOfDay(for: noon)
        }
    }
}
