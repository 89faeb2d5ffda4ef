import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// The values each template reads, as stored properties (the template engine reads them by reflection).
/// Everything here is plain text; the templates escape it.
enum DashboardPages {
    struct Common {
        var base: String
        var pageTitle: String
        var roleLabel: String
        var live: String
        var renderedAt: String
    }

    static func common(_ title: String, role: DashboardRole, base: String, now: Date) -> Common {
        Common(
            base: base,
            pageTitle: title,
            roleLabel: role == .doctor ? "Clinician" : "Patient",
            live: role == .doctor ? "on" : "off",
            renderedAt: Output.date(now)
        )
    }

    struct OrderLink {
        var link: String
        var label: String
        var current: Bool
    }

    struct TriageRowView {
        var username: String
        var link: String
        var integrityClass: String
        var integrityLabel: String
        var integrityDetail: String
        var categories: String
        var week: String
        var month: String
        var trend: String
        var lastChange: String
        var asOf: String
    }

    struct TriagePage {
        var base: String
        var pageTitle: String
        var roleLabel: String
        var live: String
        var renderedAt: String
        var unverified: String?
        var orders: [OrderLink]
        var rows: [TriageRowView]
    }

    /// The triage page's HTML; `base` is the run's prefix with its final slash, `unverified` how many
    /// patients the server listed whose share did not verify (said above the table, never dropped).
    static func triage(_ list: TriageList, role: DashboardRole, base: String = "/", unverified: Int = 0, now: Date = Date()) -> String {
        let c = common("My patients", role: role, base: base, now: now)
        let page = TriagePage(
            base: c.base,
            pageTitle: c.pageTitle,
            roleLabel: c.roleLabel,
            live: c.live,
            renderedAt: c.renderedAt,
            unverified: unverified == 0
                ? nil
                : "\(unverified) patient\(unverified == 1 ? "" : "s") listed by the server did not verify and \(unverified == 1 ? "is" : "are") not shown "
                    + "(a share whose signatures did not check out; 'carevault-doctor patients' names the problem).",
            orders: TriageList.Order.allCases.map { OrderLink(link: DashboardPaths.sort($0), label: $0.label, current: $0 == list.order) },
            rows: list.rows.map { r in
                TriageRowView(
                    username: r.username,
                    link: r.link,
                    integrityClass: r.integrityClass,
                    integrityLabel: r.integrityLabel,
                    integrityDetail: r.integrityDetail,
                    categories: r.categories,
                    week: r.weekText,
                    month: r.monthText,
                    trend: r.trend,
                    lastChange: r.lastChangeText,
                    asOf: r.asOfText
                )
            }
        )
        return neutralised(DashboardTemplates.library.render(page, withTemplate: "triage") ?? "")
    }

    struct Mark {
        var cls: String
        var symbol: String
        var label: String
    }

    struct Dated {
        var date: String
        var text: String
    }

    struct ActivityView {
        var id: String
        var title: String
        var category: String
        var schedule: String
        var instructions: String?
        var chart: SVGChart?
        var hasMarks: Bool
        var marks: [Mark]
        var hasTexts: Bool
        var texts: [Dated]
        var hasNotes: Bool
        var notes: [Dated]
    }

    struct ShareRow {
        var doctor: String
        var category: String
        var state: String
        var since: String
        var expires: String
    }

    struct LogRow {
        var time: String
        var action: String
        var checked: String
        var details: String
    }

    struct PatientPage {
        var base: String
        var pageTitle: String
        var roleLabel: String
        var live: String
        var renderedAt: String
        var username: String
        var integrityClass: String
        var integrityLabel: String
        var integrityDetail: String
        var asOf: String
        var categories: String?
        var awaitingKeys: String?
        var serverBehind: String?
        var csvLink: String
        var downloadNote: String?
        var fhirLink: String
        var calendar: AdherenceCalendar
        var activities: [ActivityView]
        var isPatient: Bool
        var shares: [ShareRow]
        var logAnchor: String
        var logProblem: String?
        var logRewritten: String?
        var log: [LogRow]
    }

    /// A patient's page's HTML.
    static func patient(_ sheet: PatientSheet, role: DashboardRole, base: String = "/", now: Date = Date(), timeZone: TimeZone = .current) -> String {
        let c = common(sheet.username, role: role, base: base, now: now)
        // Grouped once: filtering every outcome for every activity grows with their product.
        let byActivity = Dictionary(grouping: sheet.outcomes, by: \.activityID)
        let activities = sheet.activities.enumerated().map { index, a in activity(a, index: index, outcomes: byActivity[a.id] ?? []) }
        let log = sheet.accessLog
        let page = PatientPage(
            base: c.base,
            pageTitle: c.pageTitle,
            roleLabel: c.roleLabel,
            live: c.live,
            renderedAt: c.renderedAt,
            username: sheet.username,
            integrityClass: sheet.integrity.cssClass,
            integrityLabel: sheet.integrity.label,
            integrityDetail: sheet.integrity.detail,
            asOf: sheet.asOf.map { Output.date(millis: $0) } ?? "not confirmed",
            categories: sheet.categories.isEmpty ? nil : sheet.categories.joined(separator: ", "),
            awaitingKeys: sheet.awaitingKeys.isEmpty ? nil : sheet.awaitingKeys.joined(separator: ", "),
            serverBehind: sheet.serverBehind.isEmpty ? nil : sheet.serverBehind.joined(separator: "; "),
            csvLink: DashboardPaths.export(sheet.username, .csv),
            downloadNote: sheet.integrity.downloadNote,
            fhirLink: DashboardPaths.export(sheet.username, .fhir),
            calendar: AdherenceCalendar(sheet, now: now, timeZone: timeZone),
            activities: activities,
            isPatient: role == .patient,
            shares: (sheet.shares ?? []).map { s in
                ShareRow(
                    doctor: s.doctor,
                    category: s.category,
                    state: s.state,
                    since: Output.date(millis: s.since),
                    expires: s.expiresAt.map { Output.date(millis: $0) } ?? "never"
                )
            },
            logAnchor: log == nil
                ? "Not shown: the access log could not be read or verified."
                : log?.checkpoint.map { "Verified against checkpoint \($0.sequence) signed at \(Output.date(millis: $0.signedAt))." }
                    ?? "Not verified: the admin has not signed an audit checkpoint yet.",
            logProblem: sheet.accessLogProblem,
            logRewritten: log?.rewrittenSinceLastCheck.map { "Warning: \($0)." },
            log: (log?.entries ?? []).reversed().map { e in
                LogRow(
                    time: Output.date(millis: e.at),
                    action: e.action,
                    checked: log?.isCheckpointed(e) == true ? "verified" : "not yet checkpointed",
                    details: Output.details(e.details, names: sheet.names)
                )
            }
        )
        return neutralised(DashboardTemplates.library.render(page, withTemplate: "patient") ?? "")
    }

    /// `html` with every bidirectional-override and -isolate control replaced by U+FFFD: patient text
    /// cannot reorder what the page shows around it (the tools' own output and the CSV neutralise the same
    /// characters). The templates hold none, so only patient or server text is touched.
    static func neutralised(_ html: String) -> String {
        guard html.unicodeScalars.contains(where: isBidiControl) else { return html }
        var out = String.UnicodeScalarView()
        for scalar in html.unicodeScalars { out.append(isBidiControl(scalar) ? "\u{FFFD}" : scalar) }
        return String(out)
    }

    static func isBidiControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F, 0x061C: true
        default: false
        }
    }

    /// One activity's block: its chart when it has numeric values or a numeric target, its yes/no marks,
    /// its text answers and the notes of its outcomes (`outcomes` may be all of them or this activity's).
    static func activity(_ a: Activity, index: Int, outcomes: [Outcome]) -> ActivityView {
        let mine = outcomes.filter { $0.activityID == a.id }.sorted { $0.occurrence < $1.occurrence }
        let readings = SVGChart.readings(of: a, outcomes: mine)
        let (target, units) = SVGChart.target(of: a, outcomes: mine)
        let chart =
            readings.isEmpty && target == nil ? nil : SVGChart(id: "chart-\(index)", title: a.title, units: units, readings: readings, target: target)
        let when = { (o: Outcome) in SVGChart.day(a.schedule.event(occurrence: o.occurrence)?.start ?? o.createdAt) }
        var marks: [Mark] = []
        var texts: [Dated] = []
        for o in mine {
            for v in o.liveValues {
                switch v.value {
                case let .boolean(b): marks.append(Mark(cls: b ? "yes" : "no", symbol: b ? "✓" : "✗", label: "\(when(o)): \(b ? "yes" : "no")"))
                case let .text(t): texts.append(Dated(date: when(o), text: t))
                case .number: break
                }
            }
        }
        let notes = mine.compactMap { o in o.note.map { Dated(date: when(o), text: $0) } }
        return ActivityView(
            id: a.id,
            title: a.title,
            category: a.category,
            schedule: CareInput.describe(a.schedule),
            instructions: a.instructions?.isEmpty == false ? a.instructions : nil,
            chart: chart,
            hasMarks: !marks.isEmpty,
            marks: marks,
            hasTexts: !texts.isEmpty,
            texts: texts,
            hasNotes: !notes.isEmpty,
            notes: notes
        )
    }
}

/// The adherence heat map: one cell per day of the last five weeks, a column per week, shaded by the
/// share of that day's scheduled occurrences that were done.
struct AdherenceCalendar {
    struct Cell {
        var x: Int
        var y: Int
        var level: String
        var label: String
    }

    static let days = 35
    let width = 5 * 22
    let height = 7 * 22
    let cells: [Cell]
    let summary: String

    init(_ sheet: PatientSheet, now: Date, timeZone: TimeZone) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let end = calendar.date(byAdding: .day, value: 1, to: calendar.startOfDay(for: now)) ?? now
        let start = calendar.date(byAdding: .day, value: -Self.days, to: end) ?? now
        let rows = (try? Adherence.rows(activities: sheet.activities, outcomes: sheet.outcomes, from: start, to: end, timeZone: timeZone)) ?? []
        var byDay: [String: (expected: Int, completed: Int)] = [:]
        for row in rows {
            for d in row.days {
                let sum = byDay[d.date] ?? (0, 0)
                byDay[d.date] = (sum.expected + d.expected, sum.completed + d.completed)
            }
        }
        var cells: [Cell] = []
        var done = 0
        var expected = 0
        for i in 0..<Self.days {
            guard let date = calendar.date(byAdding: .day, value: i, to: start) else { continue }
            let key = SVGChart.day(date)
            let (e, c) = byDay[key] ?? (0, 0)
            done += c
            expected += e
            let ratio = e == 0 ? -1 : Double(c) / Double(e)
            let level = ratio < 0 ? "none" : ratio == 0 ? "l0" : ratio < 0.5 ? "l1" : ratio < 1 ? "l2" : "l4"
            let label = e == 0 ? "\(key): nothing scheduled" : "\(key): \(c) of \(e) done"
            cells.append(Cell(x: (i / 7) * 22, y: (i % 7) * 22, level: level, label: label))
        }
        self.cells = cells
        summary = "Adherence calendar, \(SVGChart.day(start)) to \(SVGChart.day(end.addingTimeInterval(-1))): \(done) of \(expected) scheduled done"
    }
}
