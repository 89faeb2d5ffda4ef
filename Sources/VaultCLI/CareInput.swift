import Foundation
import VaultCore

/// Parsing of what people type: dates, values and schedules.
public enum CareInput {
    /// The days from `from` to `to` inclusive as a half-open range of local midnights, either end open
    /// when not given; `--from` after `--to` is a usage error.
    public static func range(from: Day?, to: Day?, timeZone: TimeZone = .current) throws -> (from: Date?, to: Date?) {
        let start = from.map { $0.start(in: timeZone) }
        let end = to.map { $0.start(in: timeZone).addingTimeInterval(86_400) }
        if let start, let end, start >= end { throw CLIError.usage("--from is after --to") }
        return (start, end)
    }

    /// Text given directly or read from a file (`-` for standard input), for the long text an argument
    /// cannot carry (the system limits one argument to 128 KiB); one trailing line break is dropped.
    public static func text(_ direct: String?, file: String?, option: String, passwordStdin: Bool = false) throws -> String? {
        guard let file else { return direct }
        guard direct == nil else { throw CLIError.usage("give --\(option) or --\(option)-file, not both") }
        var text = try read(file, what: "--\(option)-file", passwordStdin: passwordStdin)
        if text.last?.isNewline == true { text.removeLast() }
        return text
    }

    /// A UTF-8 text file's contents, or standard input's for `-`; `what` names it in errors. Standard
    /// input holds the password when `passwordStdin` is set, so it cannot also hold the text.
    public static func read(_ file: String, what: String, passwordStdin: Bool) throws -> String {
        let data: Data?
        if file == "-" {
            guard !passwordStdin else {
                throw CLIError.usage("--password-stdin and \(what) - both read standard input", hint: "give the text in a file")
            }
            // blocking: a tool reads its input before any other work of its process starts
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            data = FileManager.default.contents(atPath: file)
        }
        guard let data, let text = String(data: data, encoding: .utf8) else {
            throw CLIError.usage("cannot read \(what) \(Output.printable(file))", hint: "give a readable UTF-8 text file, or - for standard input")
        }
        return text
    }

    /// `HH:MM` as date components.
    public static func time(_ text: String) throws -> DateComponents {
        let p = text.split(separator: ":").compactMap { Int($0) }
        guard p.count == 2, (0...23).contains(p[0]), (0...59).contains(p[1]) else {
            throw CLIError.usage("'\(Output.printable(text))' is not a time of day", hint: "use HH:MM, e.g. 08:00")
        }
        return DateComponents(hour: p[0], minute: p[1])
    }

    /// A value: a number, `true`/`false`/`yes`/`no`, or text.
    public static func value(_ text: String) -> OutcomeValue.Value {
        if let n = Double(text), n.isFinite { return .number(n) }
        switch text.lowercased() {
        case "true", "yes", "done": return .boolean(true)
        case "false", "no": return .boolean(false)
        default: return .text(text)
        }
    }

    /// A target such as `10000 steps` or `2 tablets`.
    public static func target(_ text: String, at date: Date) -> OutcomeValue {
        let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
        let v = value(parts.first ?? text)
        return OutcomeValue(value: v, units: parts.count > 1 && v != .text(text) ? parts[1] : nil, kind: "target", createdAt: date)
    }

    static let weekdays = ["sun": 1, "mon": 2, "tue": 3, "wed": 4, "thu": 5, "fri": 6, "sat": 7]

    /// A schedule: one or more elements separated by `;`, each one of
    /// `daily@08:00[,20:00]`, `weekly:mon,wed,fri@09:00`, `every:3d@08:00`, `every:6h`, `allday`.
    public static func schedule(_ spec: String, start: Date, end: Date?, timeZone: TimeZone, targets: [OutcomeValue] = []) throws -> Schedule {
        var parts: [Schedule] = []
        for raw in spec.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces).lowercased() }) where !raw.isEmpty {
            let (head, at) = split(raw)
            do {
                if head == "daily" {
                    let times = try (at ?? "08:00").split(separator: ",").map { try time(String($0)) }
                    parts.append(try Schedule.dailyAtTimes(start: start, end: end, times: times, timeZone: timeZone, targetValues: targets))
                } else if head.hasPrefix("weekly:") {
                    let days = try head.dropFirst("weekly:".count).split(separator: ",").map { d -> Int in
                        guard let n = weekdays[String(d.prefix(3))] else {
                            throw CLIError.usage("'\(Output.printable(String(d)))' is not a weekday", hint: "use mon, tue, wed, thu, fri, sat, sun")
                        }
                        return n
                    }
                    parts.append(
                        try Schedule.weekly(
                            start: start,
                            end: end,
                            weekdays: days,
                            at: try time(at ?? "08:00"),
                            timeZone: timeZone,
                            targetValues: targets
                        )
                    )
                } else if head.hasPrefix("every:"), head.hasSuffix("d"), let n = Int(head.dropFirst("every:".count).dropLast()) {
                    parts.append(
                        try Schedule.everyNDays(n, start: start, end: end, at: try time(at ?? "08:00"), timeZone: timeZone, targetValues: targets)
                    )
                } else if head.hasPrefix("every:"), head.hasSuffix("h"), let n = Int(head.dropFirst("every:".count).dropLast()) {
                    parts.append(
                        Schedule(elements: [
                            try ScheduleElement(
                                start: start,
                                end: end,
                                interval: .hours(n),
                                targetValues: targets,
                                timeZoneIdentifier: timeZone.identifier
                            )
                        ])
                    )
                } else if head == "allday" {
                    parts.append(try Schedule.allDay(start: start, end: end, timeZone: timeZone, targetValues: targets))
                } else {
                    throw CLIError.usage(
                        "unknown schedule '\(Output.printable(raw))'",
                        hint: "use daily@08:00,20:00 · weekly:mon,thu@09:00 · every:3d@08:00 · every:6h · allday"
                    )
                }
            } catch let e as CLIError {
                throw e
            } catch {
                throw CLIError.usage("invalid schedule '\(Output.printable(raw))': \(error)")
            }
        }
        guard !parts.isEmpty else { throw CLIError.usage("the schedule is empty") }
        return Schedule(composing: parts)
    }

    static func split(_ raw: String) -> (String, String?) {
        guard let at = raw.firstIndex(of: "@") else { return (raw, nil) }
        return (String(raw[..<at]), String(raw[raw.index(after: at)...]))
    }

    /// A readable description of a schedule.
    public static func describe(_ schedule: Schedule) -> String {
        schedule.elements.map { e in
            let f = DateFormatter()
            f.locale = Locale(identifier: "en_US_POSIX")
            f.timeZone = TimeZone(identifier: e.timeZoneIdentifier) ?? .current
            f.dateFormat = "HH:mm"
            let at = e.allDay ? "all day" : "at \(f.string(from: e.start))"
            switch e.interval {
            case let .days(n): return n == 1 ? "daily \(at)" : "every \(n) days \(at)"
            case let .weeks(n):
                f.dateFormat = "EEE"
                let day = f.string(from: e.start)
                f.dateFormat = "HH:mm"
                return (n == 1 ? "weekly on \(day)" : "every \(n) weeks on \(day)") + " at \(f.string(from: e.start))"
            case let .hours(n): return "every \(n) hours"
            }
        }.joined(separator: "; ")
    }

    /// A value for people: `4200 steps`, `yes`, `"slept well"`.
    public static func text(_ v: OutcomeValue) -> String {
        let base: String
        switch v.value {
        case let .number(n): base = n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case let .boolean(b): base = b ? "yes" : "no"
        case let .text(t): base = t
        }
        return v.units.map { "\(base) \($0)" } ?? base
    }
}
