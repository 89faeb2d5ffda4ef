import Foundation
import Testing
import VaultCore

@testable import VaultDashboard

/// The SVG charts and the pages' templates: one point per recorded value, patient text escaped in text
/// and attributes alike, an empty chart that says so, and no raw interpolation in any template.
@Suite("Dashboard: SVG charts and templates")
struct SVGChartTests {
    static let hostile = [
        "<img src=x onerror=alert(1)>", "</script><script>window.pwned=1</script>", "\"><svg onload=alert(1)>", "'><b>x</b>", "a & b",
    ]

    static func readings(_ values: [Double]) -> [SVGChart.Reading] {
        values.enumerated().map { SVGChart.Reading(date: Date(timeIntervalSince1970: 1_790_000_000 + Double($0.offset) * 86_400), value: $0.element) }
    }

    /// A daily 08:00 (UTC) activity from `start`.
    static func walk(title: String, instructions: String?, start: Date) throws -> Activity {
        try Activity(
            id: "walk",
            title: title,
            instructions: instructions,
            category: "interventions",
            schedule: .dailyAtTimes(start: start, times: [DateComponents(hour: 8, minute: 0)], timeZone: TimeZone(identifier: "UTC")!),
            createdAt: start
        )
    }

    static func count(_ needle: String, in text: String) -> Int { text.components(separatedBy: needle).count - 1 }

    @Test(arguments: [1, 2, 7, 40])
    func aChartHasOnePointPerRecordedValue(count: Int) {
        let chart = SVGChart(id: "c", title: "Walk", units: "min", readings: Self.readings((0..<count).map { Double($0 * 3) }), target: 30)
        let svg = chart.render()
        #expect(chart.pointCount == count)
        #expect(Self.count("<circle class=\"point\"", in: svg) == count)
        #expect(svg.contains("<title id=\"c-title\">Walk (min)</title>"))
        #expect(svg.contains("class=\"target\""))
        #expect(svg.contains("target 30 min"))
        #expect(svg.contains("aria-labelledby=\"c-title c-desc\""))
        #expect(svg.contains("<desc id=\"c-desc\">\(count) value\(count == 1 ? "" : "s") from"))
    }

    @Test func pointsStayInsideThePlotAndTheLineFollowsThem() throws {
        let chart = SVGChart(id: "c", title: "Pain", units: nil, readings: Self.readings([5, 1, 9, 9]), target: nil)
        for p in chart.points {
            let x = try #require(Double(p.x))
            let y = try #require(Double(p.y))
            #expect(x >= SVGChart.left && x <= SVGChart.width - SVGChart.right)
            #expect(y >= SVGChart.top && y <= SVGChart.height - SVGChart.bottom)
        }
        #expect(chart.polyline.split(separator: " ").count == 4)
        // Higher values are drawn higher (smaller y).
        #expect(Double(chart.points[2].y)! < Double(chart.points[1].y)!)
        #expect(!chart.render().contains("class=\"target\""))
    }

    @Test func anEmptyChartSaysSoAndNonFiniteValuesAreLeftOut() {
        let empty = SVGChart(id: "e", title: "Walk", units: "min", readings: [], target: 30)
        let svg = empty.render()
        #expect(empty.pointCount == 0)
        #expect(Self.count("<circle", in: svg) == 0)
        #expect(!svg.contains("<polyline"))
        #expect(svg.contains("No values recorded yet."))
        #expect(svg.contains("no values recorded, target 30 min"))
        let odd = SVGChart(id: "n", title: "x", units: nil, readings: Self.readings([.nan, 2, .infinity]), target: nil)
        #expect(odd.pointCount == 1)
        #expect(!odd.render().contains("nan"))
    }

    @Test(arguments: hostile)
    func patientTextIsEscapedInTextAndAttributes(text: String) throws {
        let chart = SVGChart(id: "h", title: text, units: text, readings: Self.readings([1, 2]), target: 3)
        let svg = chart.render()
        #expect(!svg.contains(text), "raw: \(svg)")
        #expect(!svg.contains("<img"))
        #expect(!svg.contains("<script"))
        #expect(!svg.contains("<svg onload"))
        #expect(Self.count("<svg", in: svg) == 1)

        let activity = try Self.walk(title: text, instructions: text, start: Date(timeIntervalSince1970: 1_790_000_000))
        let outcome = Outcome(
            activityID: "walk",
            occurrence: 0,
            values: [OutcomeValue(value: .number(3), units: text, createdAt: Date(timeIntervalSince1970: 1_790_000_100))],
            note: text,
            createdAt: Date(timeIntervalSince1970: 1_790_000_100)
        )
        var sheet = PatientSheet(
            username: "alice",
            categories: [text],
            activities: [activity],
            outcomes: [outcome],
            lastChange: 1,
            asOf: nil,
            integrity: .failure(text)
        )
        sheet.awaitingKeys = [text]
        sheet.serverBehind = [text]
        #expect(DashboardPages.patient(sheet, role: .doctor).contains("id=\"server-behind\""), "the note is on the page, escaped")
        for page in [
            DashboardPages.patient(sheet, role: .doctor), DashboardPages.patient(sheet, role: .patient),
            DashboardPages.triage(TriageList([sheet], order: .attention), role: .doctor),
        ] {
            #expect(!page.contains(text))
            #expect(!page.contains("<img"))
            #expect(!page.contains("<svg onload"))
            #expect(!page.contains("<b>"))
            #expect(Self.count("<script", in: page) == 1, "only the page's own external script")
            #expect(page.contains("<script src=\"/static/live.js\" defer></script>"))
        }
    }

    @Test func noTemplateInterpolatesRawTextAndNoneHasInlineScriptOrStyle() {
        for (name, text) in DashboardTemplates.sources {
            #expect(!text.contains("{{{"), "\(name)")
            #expect(!text.contains("{{&"), "\(name)")
            #expect(!text.contains("style="), "\(name)")
            #expect(text.range(of: " on[a-z]+=", options: .regularExpression) == nil, "\(name): an inline event handler")
            #expect(DashboardTemplates.library.getTemplate(named: name) != nil, "\(name) does not parse")
        }
    }

    @Test func theTriageListPutsIntegrityFailuresFirstAndSortsOnRequest() throws {
        let day = 86_400.0
        let now = Date(timeIntervalSince1970: 1_790_000_000)
        func sheet(_ name: String, done: Int, integrity: IntegrityState, change: Int64) throws -> PatientSheet {
            let start = now.addingTimeInterval(-20 * day)
            let activity = try Self.walk(title: "Walk", instructions: nil, start: start)
            let events = (try? activity.schedule.events(from: now.addingTimeInterval(-7 * day), to: now)) ?? []
            let outcomes = events.prefix(done).map { e in
                Outcome(
                    activityID: "walk",
                    occurrence: e.occurrence,
                    values: [OutcomeValue(value: .boolean(true), createdAt: e.start)],
                    createdAt: e.start
                )
            }
            return PatientSheet(
                username: name,
                categories: ["interventions"],
                activities: [activity],
                outcomes: Array(outcomes),
                lastChange: change,
                asOf: 1,
                integrity: integrity
            )
        }
        let sheets = [
            try sheet("ann", done: 7, integrity: .verified, change: 3), try sheet("bea", done: 1, integrity: .verified, change: 1),
            try sheet("cid", done: 7, integrity: .failure("bad"), change: 2), try sheet("dot", done: 7, integrity: .notConfirmed, change: 4),
        ]
        #expect(TriageList(sheets, order: .attention, now: now).rows.map(\.username) == ["cid", "dot", "bea", "ann"])
        #expect(TriageList(sheets, order: .patient, now: now).rows.map(\.username) == ["ann", "bea", "cid", "dot"])
        #expect(TriageList(sheets, order: .change, now: now).rows.map(\.username) == ["dot", "ann", "cid", "bea"])
        let ann = TriageList(sheets, order: .patient, now: now).rows[0]
        #expect(ann.weekText == "100%")
        #expect(ann.integrityLabel == "verified")
        let page = DashboardPages.triage(TriageList(sheets, order: .attention, now: now), role: .doctor)
        #expect(Self.count("class=\"patient-row\"", in: page) == 4)
        #expect(page.contains("integrity failure"))
        #expect(page.contains("not confirmed"))
        let empty = DashboardPages.triage(TriageList([], order: .attention, now: now), role: .doctor)
        #expect(!empty.contains("class=\"patient-row\""))
        #expect(empty.contains("No patient shares data with you yet."))
    }

    /// Every number in a coordinate attribute of the chart's markup.
    static func coordinates(_ svg: String) -> [String] {
        let pattern = #/ (?:cx|cy|x|y|x1|x2|y1|y2)="([^"]*)"/#
        var values = svg.matches(of: pattern).map { String($0.output.1) }
        if let points = svg.firstMatch(of: #/points="([^"]*)"/#) {
            values += points.output.1.split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init)
        }
        return values
    }

    @Test(
        arguments: [
            ([1.7e308, -1.7e308], 1e308, 0.0),
            ([Double.greatestFiniteMagnitude, -Double.greatestFiniteMagnitude, 0], nil, 0.0),
            ([1e300, 1e300], nil, 0.0),
            ([1, 2, 3], 1.7e308, 0.0),
            ([1, 2], nil, 1e300),
            ([4, 5], -1.7e308, -1e300),
        ] as [([Double], Double?, Double)]
    )
    func chartCoordinatesAreAlwaysFiniteNumbers(values: [Double], target: Double?, spread: Double) throws {
        // `spread` > 0 puts the first and last reading at extreme times (a date far in the past, one far ahead).
        let readings = values.enumerated().map { i, v in
            let t: Double = spread == 0 ? 1_790_000_000 + Double(i) * 86_400 : (i == 0 ? -spread : (i == values.count - 1 ? spread : 0))
            return SVGChart.Reading(date: Date(timeIntervalSince1970: t), value: v)
        }
        let chart = SVGChart(id: "c", title: "Extreme", units: nil, readings: readings, target: target)
        let svg = chart.render()
        let coordinates = Self.coordinates(svg)
        #expect(!coordinates.isEmpty)
        for c in coordinates {
            let value = try #require(Double(c), "not a number: \(c)")
            #expect(value.isFinite, "\(c)")
            #expect(value >= 0 && value <= SVGChart.width, "\(c) outside the drawing")
        }
        #expect(chart.pointCount == values.count)
        #expect(!svg.contains("\"nan") && !svg.contains("\"inf") && !svg.contains("\"-inf") && !svg.contains(",nan") && !svg.contains(",inf"))
    }
}
