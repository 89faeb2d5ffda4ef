import Foundation
import VaultCLI
import VaultCore

/// The triage list: one row per patient, patients needing attention first unless another order is asked
/// for (`?sort=`), so the order works without scripting.
public struct TriageList: Sendable {
    /// The orders a list can be sorted in, by query parameter `sort`.
    public enum Order: String, Sendable, CaseIterable {
        case attention, patient, week, month, change

        var label: String {
            switch self {
            case .attention: "needs attention"
            case .patient: "patient"
            case .week: "7 days"
            case .month: "30 days"
            case .change: "last change"
            }
        }
    }

    /// One patient's row, computed from their sheet.
    public struct Row: Sendable {
        public var username: String
        public var link: String
        public var categories: String
        public var week: Double?
        public var month: Double?
        public var previousWeek: Double?
        public var lastChange: Int64?
        public var asOf: Int64?
        public var integrity: IntegrityState

        var weekText: String { Self.percent(week) }
        var monthText: String { Self.percent(month) }
        var lastChangeText: String { lastChange.map { Output.date(millis: $0) } ?? "-" }
        var asOfText: String { asOf.map { Output.date(millis: $0) } ?? "not confirmed" }
        var integrityLabel: String { integrity.label }
        var integrityClass: String { integrity.cssClass }
        var integrityDetail: String { integrity.detail }

        /// Up, down or steady: this week against the one before.
        var trend: String {
            guard let week, let previousWeek else { return "–" }
            if week > previousWeek + 0.05 { return "▲ up" }
            if week < previousWeek - 0.05 { return "▼ down" }
            return "= steady"
        }

        /// Lower is more urgent: an integrity failure, then not confirmed, then low or falling adherence.
        var urgency: Double {
            switch integrity {
            case .failure, .unreadable: return -2
            case .notConfirmed, .partial, .behind: return -1 + (week ?? 0) / 10
            case .verified, .ownDevice: return (week ?? 1) - (trend.hasPrefix("▼") ? 0.1 : 0)
            }
        }

        static func percent(_ r: Double?) -> String { r.map { "\(Int(($0 * 100).rounded()))%" } ?? "-" }
    }

    public let rows: [Row]
    public let order: Order

    /// The rows for `sheets` as of `now`, in `order`.
    public init(_ sheets: [PatientSheet], order: Order, now: Date = Date(), timeZone: TimeZone = .current) {
        self.order = order
        let day = 86_400.0
        let rows = sheets.map { s -> Row in
            let ratio = { (from: Double, to: Double) in
                Self.ratio(s, from: now.addingTimeInterval(-from * day), to: now.addingTimeInterval(-to * day), timeZone: timeZone)
            }
            return Row(
                username: s.username,
                link: DashboardPaths.patient(s.username),
                categories: s.categories.joined(separator: ", "),
                week: ratio(7, 0),
                month: ratio(30, 0),
                previousWeek: ratio(14, 7),
                lastChange: s.lastChange,
                asOf: s.asOf,
                integrity: s.integrity
            )
        }
        self.rows = rows.sorted { a, b in
            switch order {
            case .attention: a.urgency != b.urgency ? a.urgency < b.urgency : a.username < b.username
            case .patient: a.username < b.username
            case .week: (a.week ?? 2) != (b.week ?? 2) ? (a.week ?? 2) < (b.week ?? 2) : a.username < b.username
            case .month: (a.month ?? 2) != (b.month ?? 2) ? (a.month ?? 2) < (b.month ?? 2) : a.username < b.username
            case .change: (a.lastChange ?? 0) != (b.lastChange ?? 0) ? (a.lastChange ?? 0) > (b.lastChange ?? 0) : a.username < b.username
            }
        }
    }

    /// Done over expected occurrences of every activity in [from, to); nil when nothing was expected.
    static func ratio(_ sheet: PatientSheet, from: Date, to: Date, timeZone: TimeZone) -> Double? {
        guard let rows = try? Adherence.rows(activities: sheet.activities, outcomes: sheet.outcomes, from: from, to: to, timeZone: timeZone)
        else { return nil }
        let expected = rows.reduce(0) { $0 + $1.expected }
        return expected == 0 ? nil : Double(rows.reduce(0) { $0 + $1.completed }) / Double(expected)
    }
}

/// The dashboard's URLs, built in one place, relative to the run's prefix (the templates put `{{base}}`,
/// the prefix with its final slash, before each); a username is percent-encoded as one path segment.
enum DashboardPaths {
    static func patient(_ username: String) -> String { "patient/" + segment(username) }
    static func export(_ username: String, _ format: ExportFormat) -> String { patient(username) + "/export.\(format.fileExtension)" }
    static func sort(_ order: TriageList.Order) -> String { "?sort=\(order.rawValue)" }

    static func segment(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
    }
}
