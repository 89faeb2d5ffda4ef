import Foundation
import VaultCore

/// A line chart of one numeric activity's values over time, laid out in Swift and drawn as SVG by the
/// `chart` template (so every label goes through the template engine's escaping). It has a <title> and
/// a <desc>, each point a <title> of its own, and only numbers in its coordinates.
public struct SVGChart: Sendable {
    /// One recorded value.
    public struct Reading: Sendable, Equatable {
        public var date: Date
        public var value: Double
        public init(date: Date, value: Double) {
            self.date = date
            self.value = value
        }
    }

    /// One drawn point: its place and what a screen reader or a hover says of it.
    struct Point: Sendable {
        var x: String
        var y: String
        var label: String
    }

    /// A horizontal line with its label (the target, the axis ticks).
    struct Rule: Sendable {
        var y: String
        var label: String
    }

    /// A label under the x axis.
    struct Tick: Sendable {
        var x: String
        var label: String
        /// "start" for the first date, "end" for the last: neither runs off the chart.
        var anchor: String
    }

    static let width = 640.0
    static let height = 200.0
    static let left = 56.0
    static let right = 16.0
    static let top = 14.0
    static let bottom = 30.0

    let id: String
    let title: String
    let desc: String
    let units: String?
    let points: [Point]
    let polyline: String
    let target: Rule?
    let ticks: [Rule]
    let dates: [Tick]
    let empty: Bool
    let width = Int(SVGChart.width)
    let height = Int(SVGChart.height)
    let plotLeft = Int(SVGChart.left)
    let plotRight = Int(SVGChart.width - SVGChart.right)
    let plotBottom = Int(SVGChart.height - SVGChart.bottom)

    /// Lays out `readings` (any order) with `target`, labelled by `title` and `units`. `id` names the
    /// chart's title and description for `aria-labelledby`; it must be unique on the page and is never
    /// patient text.
    public init(id: String, title: String, units: String?, readings: [Reading], target: Double?) {
        self.id = id
        self.title = title
        self.units = units?.isEmpty == false ? units : nil
        let units = units ?? ""
        let sorted = readings.filter { $0.value.isFinite }.sorted { $0.date < $1.date }
        empty = sorted.isEmpty
        let unitText = units.isEmpty ? "" : " \(units)"
        let targetText = target.map { ", target \(Self.number($0))\(unitText)" } ?? ""
        guard let first = sorted.first, let last = sorted.last else {
            desc = "no values recorded\(targetText)"
            points = []
            polyline = ""
            self.target = nil
            ticks = []
            dates = []
            return
        }
        desc = "\(sorted.count) value\(sorted.count == 1 ? "" : "s") from \(Self.day(first.date)) to \(Self.day(last.date))\(targetText)"
        var low = sorted.map(\.value).min()!
        var high = sorted.map(\.value).max()!
        if let target, target.isFinite {
            low = min(low, target)
            high = max(high, target)
        }
        // Halved before subtracting: high - low overflows to infinity for values near ±1.7e308.
        var halfRange = high / 2 - low / 2
        if halfRange < 5e-10 {
            low -= 1
            high += 1
            halfRange = high / 2 - low / 2
        }
        let t0 = first.date.timeIntervalSince1970
        let halfSpan = last.date.timeIntervalSince1970 / 2 - t0 / 2
        let x = { (d: Date) -> Double in
            let share = (d.timeIntervalSince1970 / 2 - t0 / 2) / halfSpan
            return halfSpan > 0 && share.isFinite
                ? Self.left + share * (Self.width - Self.left - Self.right)
                : (Self.left + Self.width - Self.right) / 2
        }
        let y = { (v: Double) -> Double in
            let share = (v / 2 - low / 2) / halfRange
            return Self.height - Self.bottom - (share.isFinite && halfRange > 0 ? share : 0.5) * (Self.height - Self.top - Self.bottom)
        }
        let span = halfSpan
        points = sorted.map { r in
            Point(x: Self.coordinate(x(r.date)), y: Self.coordinate(y(r.value)), label: "\(Self.day(r.date)): \(Self.number(r.value))\(unitText)")
        }
        polyline = points.map { "\($0.x),\($0.y)" }.joined(separator: " ")
        self.target = target.map { Rule(y: Self.coordinate(y($0)), label: "target \(Self.number($0))\(unitText)") }
        ticks = [low, low / 2 + high / 2, high].map { Rule(y: Self.coordinate(y($0)), label: Self.number($0)) }
        dates =
            span <= 0
            ? [Tick(x: Self.coordinate(x(first.date)), label: Self.day(first.date), anchor: "middle")]
            : [
                Tick(x: Self.coordinate(x(first.date)), label: Self.day(first.date), anchor: "start"),
                Tick(x: Self.coordinate(x(last.date)), label: Self.day(last.date), anchor: "end"),
            ]
    }

    /// The SVG markup, as the page embeds it.
    public func render() -> String { DashboardPages.neutralised(DashboardTemplates.library.render(self, withTemplate: "chart") ?? "") }

    /// How many points are drawn: one per finite reading.
    public var pointCount: Int { points.count }

    /// A coordinate as SVG reads it; never `nan` or `inf` (the plot's middle instead).
    static func coordinate(_ v: Double) -> String { String(format: "%.1f", v.isFinite ? v : height / 2) }

    static func number(_ v: Double) -> String {
        v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(format: "%.2f", v)
    }

    /// One formatter for every label: building one per call costs more than the page around it.
    nonisolated(unsafe) static let dayFormatter: DateFormatter = {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = .current
        f.dateFormat = "yyyy-MM-dd"
        return f
    }()
    static let dayLock = NSLock()

    static func day(_ d: Date) -> String { dayLock.withLock { dayFormatter.string(from: d) } }

    /// The numeric readings of one activity: every live number value of its outcomes, dated by the
    /// occurrence's scheduled start (else when it was recorded).
    public static func readings(of activity: Activity, outcomes: [Outcome]) -> [Reading] {
        outcomes.filter { $0.activityID == activity.id }.flatMap { o in
            o.liveValues.compactMap { v -> Reading? in
                guard case let .number(n) = v.value else { return nil }
                return Reading(date: activity.schedule.event(occurrence: o.occurrence)?.start ?? v.createdAt, value: n)
            }
        }
    }

    /// The activity's numeric target and its units, from its targets or its values.
    public static func target(of activity: Activity, outcomes: [Outcome]) -> (value: Double?, units: String?) {
        let targets = activity.targetValues + activity.schedule.elements.flatMap(\.targetValues)
        var value: Double?
        var units: String?
        for t in targets {
            if case let .number(n) = t.value, value == nil {
                value = n
                units = t.units
            }
        }
        if units == nil {
            units = outcomes.lazy.filter { $0.activityID == activity.id }.flatMap(\.liveValues).first { $0.units != nil }?.units
        }
        return (value, units)
    }
}
