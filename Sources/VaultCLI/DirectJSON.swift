import Foundation
import VaultCore

/// A direct writer of what `Output.encoder` (sorted keys, pretty printed, slashes unescaped, ISO 8601
/// dates) makes of the care records a view lists: Foundation's `JSONEncoder` spent about 12 µs per
/// activity, most of the time of a large `show --json` once the records were read (Docs/benchmarks.md §7).
///
/// Like the payload reader, it gives up (nil) on anything it does not write itself: a string holding a
/// control character, a number that is not a whole number below 10^15 (or is -0), a date that is not a
/// whole second from 1970 to 9999, a key of `userInfo` that is not ASCII. The caller then encodes with
/// `JSONEncoder`. For every value the result is exactly `JSONEncoder`'s text or nil (`DirectJSONTests`).
struct DirectJSON {
    private(set) var bytes: [UInt8] = []
    private var failed = false
    /// Per open container, whether it has no member yet.
    private var empty: [Bool] = []

    private init() { bytes.reserveCapacity(1_024) }

    /// The activity as `Output.encoder` writes it, or nil.
    static func activity(_ a: Activity) -> [UInt8]? {
        var w = DirectJSON()
        w.activity(a)
        return w.failed ? nil : w.bytes
    }

    /// The outcome as `Output.encoder` writes it, or nil.
    static func outcome(_ o: Outcome) -> [UInt8]? {
        var w = DirectJSON()
        w.outcome(o)
        return w.failed ? nil : w.bytes
    }

    // MARK: The records, keys in sorted order

    private mutating func activity(_ a: Activity) {
        open(UInt8(ascii: "{"))
        if let p = a.carePlanID { field("carePlanID", string: p) }
        field("category", string: a.category)
        field("createdAt", date: a.createdAt)
        field("id", string: a.id)
        if let i = a.instructions { field("instructions", string: i) }
        key("schedule")
        schedule(a.schedule)
        key("targetValues")
        values(a.targetValues)
        field("title", string: a.title)
        field("updatedAt", date: a.updatedAt)
        key("userInfo")
        strings(a.userInfo)
        close(UInt8(ascii: "}"))
    }

    private mutating func schedule(_ s: Schedule) {
        open(UInt8(ascii: "{"))
        key("elements")
        open(UInt8(ascii: "["))
        for e in s.elements {
            member()
            open(UInt8(ascii: "{"))
            field("allDay", bool: e.allDay)
            field("duration", number: e.duration)
            if let end = e.end { field("end", date: end) }
            key("interval")
            open(UInt8(ascii: "{"))
            field("count", integer: e.interval.count)
            key("unit")
            switch e.interval {
            case .hours: string("hours")
            case .days: string("days")
            case .weeks: string("weeks")
            }
            close(UInt8(ascii: "}"))
            field("start", date: e.start)
            key("targetValues")
            values(e.targetValues)
            if let t = e.text { field("text", string: t) }
            field("timeZoneIdentifier", string: e.timeZoneIdentifier)
            close(UInt8(ascii: "}"))
        }
        close(UInt8(ascii: "]"))
        close(UInt8(ascii: "}"))
    }

    private mutating func outcome(_ o: Outcome) {
        open(UInt8(ascii: "{"))
        field("activityID", string: o.activityID)
        field("createdAt", date: o.createdAt)
        if let n = o.note { field("note", string: n) }
        field("occurrence", integer: o.occurrence)
        key("removedValueIDs")
        open(UInt8(ascii: "["))
        for id in o.removedValueIDs.sorted() {
            member()
            string(id)
        }
        close(UInt8(ascii: "]"))
        field("updatedAt", date: o.updatedAt)
        key("values")
        values(o.values)
        close(UInt8(ascii: "}"))
    }

    private mutating func values(_ values: [OutcomeValue]) {
        open(UInt8(ascii: "["))
        for v in values {
            member()
            open(UInt8(ascii: "{"))
            field("createdAt", date: v.createdAt)
            field("id", string: v.id)
            if let k = v.kind { field("kind", string: k) }
            if let u = v.units { field("units", string: u) }
            key("value")
            open(UInt8(ascii: "{"))
            switch v.value {
            case let .number(n):
                field("number", number: n)
                field("type", string: "number")
            case let .text(t):
                field("text", string: t)
                field("type", string: "text")
            case let .boolean(b):
                field("boolean", bool: b)
                field("type", string: "boolean")
            }
            close(UInt8(ascii: "}"))
            close(UInt8(ascii: "}"))
        }
        close(UInt8(ascii: "]"))
    }

    private mutating func strings(_ map: [String: String]) {
        open(UInt8(ascii: "{"))
        guard map.keys.allSatisfy({ $0.utf8.allSatisfy { $0 < 0x80 } }) else {
            failed = true
            return
        }
        #if !os(Linux)
        // Foundation's own encoder on Apple systems may sort keys another way (case-insensitive, numeric).
        guard map.count < 2 else {
            failed = true
            return
        }
        #endif
        for k in map.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            key(k)
            string(map[k]!)
        }
        close(UInt8(ascii: "}"))
    }

    // MARK: The pretty printer's layout: two spaces per level, `"key" : value`, an empty container on a blank line

    private mutating func indent() { bytes.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * empty.count)) }

    private mutating func open(_ bracket: UInt8) {
        bytes.append(bracket)
        empty.append(true)
    }

    private mutating func close(_ bracket: UInt8) {
        if empty.removeLast() { bytes.append(UInt8(ascii: "\n")) }
        bytes.append(UInt8(ascii: "\n"))
        indent()
        bytes.append(bracket)
    }

    /// Before a member of the innermost container: the separator, a new line and the indentation.
    private mutating func member() {
        if empty[empty.count - 1] { empty[empty.count - 1] = false } else { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\n"))
        indent()
    }

    private mutating func field(_ k: String, string value: String) {
        key(k)
        string(value)
    }

    private mutating func field(_ k: String, date value: Date) {
        key(k)
        date(value)
    }

    private mutating func field(_ k: String, number value: Double) {
        key(k)
        number(value)
    }

    private mutating func field(_ k: String, integer value: Int) {
        key(k)
        integer(value)
    }

    private mutating func field(_ k: String, bool value: Bool) {
        key(k)
        bool(value)
    }

    private mutating func key(_ k: String) {
        member()
        string(k)
        bytes.append(contentsOf: " : ".utf8)
    }

    // MARK: Scalars

    private mutating func string(_ s: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case ..<0x20: failed = true
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func integer(_ n: Int) { bytes.append(contentsOf: String(n).utf8) }

    private mutating func bool(_ b: Bool) { bytes.append(contentsOf: (b ? "true" : "false").utf8) }

    private mutating func number(_ d: Double) {
        guard d.rounded() == d, abs(d) < 1e15, !(d == 0 && d.sign == .minus) else {
            failed = true
            return
        }
        integer(Int(d))
    }

    /// `yyyy-MM-ddTHH:mm:ssZ` in UTC, for a whole second from 1970 to 9999. Whole in the reference time
    /// the encoder's formatter rounds down from (seconds since 2001), not only since 1970.
    private mutating func date(_ date: Date) {
        let t = date.timeIntervalSinceReferenceDate
        guard t.rounded() == t, t >= -978_307_200, t < 253_402_300_800 - 978_307_200 else {
            failed = true
            return
        }
        let seconds = Int(t) + 978_307_200
        let days = seconds / 86_400
        let second = seconds % 86_400
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468
        let era = z / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        bytes.append(UInt8(ascii: "\""))
        digits(year, 4)
        bytes.append(UInt8(ascii: "-"))
        digits(month, 2)
        bytes.append(UInt8(ascii: "-"))
        digits(day, 2)
        bytes.append(UInt8(ascii: "T"))
        digits(second / 3_600, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(second / 60 % 60, 2)
        bytes.append(UInt8(ascii: ":"))
        digits(second % 60, 2)
        bytes.append(contentsOf: "Z\"".utf8)
    }

    private mutating func digits(_ n: Int, _ width: Int) {
        var place = 1
        for _ in 1..<width { place *= 10 }
        var n = n
        while place > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(n / place))
            n %= place
            place /= 10
        }
    }
}
