import Foundation
import Testing
import VaultClient
import VaultCore

@testable import VaultDashboard

/// What the pages say of a patient's state: never "verified" with records missing, the patients the
/// server listed that did not verify, the access log's own problem beside the records' state, text that
/// cannot reorder the page, and charts whose coordinates are always numbers.
@Suite("Dashboard: pages and what they say")
struct DashboardPagesTests {
    static func sheet(_ name: String, integrity: IntegrityState) -> PatientSheet {
        PatientSheet(username: name, categories: ["vitals"], activities: [], outcomes: [], lastChange: 1, asOf: 1, integrity: integrity)
    }

    @Test func aViewIsVerifiedOnlyWhenNothingIsMissing() {
        let state = { (failure: String?, unreadable: Int, awaiting: [String], unconfirmed: [String]) in
            DoctorDashboardSource.integrity(failure: failure, unreadable: unreadable, awaitingKeys: awaiting, unconfirmed: unconfirmed)
        }
        #expect(state(nil, 0, [], []) == .verified)
        #expect(state(nil, 0, [], ["vitals"]) == .notConfirmed)
        #expect(state("2 records were not shown", 3, ["vitals"], []) == .failure("2 records were not shown"))
        #expect(state(nil, 2, [], []) == .partial("2 records this device holds no key for"))
        #expect(state(nil, 1, [], []) == .partial("1 record this device holds no key for"))
        #expect(state(nil, 0, ["vitals", "notes"], []) == .partial("keys not delivered yet for vitals, notes"))
        #expect(state(nil, 0, ["vitals"], ["notes"]) == .partial("keys not delivered yet for vitals; not confirmed: notes"))
        for s in [state(nil, 2, [], []), state(nil, 0, ["vitals"], [])] {
            #expect(s.label != "verified")
            let page = DashboardPages.triage(TriageList([Self.sheet("alice", integrity: s)], order: .attention), role: .doctor)
            #expect(page.contains(">partly readable<"))
            #expect(!page.contains(">verified<"))
        }
    }

    /// A view standing on the patient's accepted state while the server is behind it (a restored backup) is
    /// never "verified" on the triage list, and its page says what its downloads carry.
    @Test func aServerBehindIsSaidOnTheRowThePageAndBesideTheDownloads() {
        let note = "the server is behind for vitals (it shows commitment 3): shown as the patient committed to it at 7"
        let behind = DoctorDashboardSource.integrity(failure: nil, unreadable: 0, awaitingKeys: [], unconfirmed: [], serverBehind: [note])
        #expect(behind == .behind(note))
        // Not confirmed outranks behind: the category's records are not the accepted set.
        #expect(
            DoctorDashboardSource.integrity(failure: nil, unreadable: 0, awaitingKeys: [], unconfirmed: ["vitals"], serverBehind: [note])
                == .notConfirmed
        )
        let list = TriageList([Self.sheet("alice", integrity: .verified), Self.sheet("bob", integrity: behind)], order: .attention)
        #expect(list.rows.map(\.username) == ["bob", "alice"], "behind needs attention before a verified row")
        let triage = DashboardPages.triage(list, role: .doctor)
        #expect(triage.contains(">server behind<"))
        #expect(triage.contains("the server is behind for vitals"))
        let page = DashboardPages.patient(Self.sheet("bob", integrity: behind), role: .doctor)
        #expect(page.contains("id=\"download-note\"") && page.contains("Downloads are marked behind"))
        let unconfirmed = DashboardPages.patient(Self.sheet("carol", integrity: .notConfirmed), role: .doctor)
        #expect(unconfirmed.contains("Downloads are marked unconfirmed"))
        #expect(!DashboardPages.patient(Self.sheet("dan", integrity: .verified), role: .doctor).contains("download-note"))
    }

    @Test func aPatientWhoseViewCouldNotBeReadIsAMarkedRowAndComesFirst() {
        let sheets = [Self.sheet("alice", integrity: .verified), Self.sheet("bob", integrity: .unreadable("the server refused the share"))]
        let list = TriageList(sheets, order: .attention)
        #expect(list.rows.map(\.username) == ["bob", "alice"])
        let page = DashboardPages.triage(list, role: .doctor)
        #expect(page.contains(">unreadable<"))
        #expect(page.contains("title=\"the server refused the share\""))
    }

    @Test func theTriageListSaysHowManyListedPatientsDidNotVerify() {
        let list = TriageList([Self.sheet("alice", integrity: .verified)], order: .attention)
        #expect(DashboardPages.triage(list, role: .doctor, unverified: 2).contains("2 patients listed by the server did not verify"))
        #expect(DashboardPages.triage(list, role: .doctor, unverified: 1).contains("1 patient listed by the server did not verify"))
        let none = DashboardPages.triage(list, role: .doctor, unverified: 0)
        #expect(!none.contains("did not verify"))
        #expect(!none.contains("id=\"unverified\""))
        // Even with no row to show, the count is not dropped.
        #expect(DashboardPages.triage(TriageList([], order: .attention), role: .doctor, unverified: 3).contains("3 patients listed"))
    }

    @Test func theAccessLogsProblemIsSaidInItsSectionBesideTheRecordsState() {
        var sheet = Self.sheet("alice", integrity: .failure("4 records from the server failed their check"))
        sheet.shares = []
        sheet.accessLogProblem = "the access log could not be read: the server is unreachable"
        let page = DashboardPages.patient(sheet, role: .patient)
        #expect(page.contains("4 records from the server failed their check"))
        #expect(page.contains("<p class=\"note bad\" id=\"log-problem\">the access log could not be read: the server is unreachable</p>"))
        #expect(!page.contains("the admin has not signed an audit checkpoint yet"))
        #expect(page.contains("Not shown: the access log could not be read or verified."))
    }

    /// A log rewritten before the point this device last checked, the full check passing (Docs/design.md
    /// §6): the patient's page says so in the log's section, beside the verdict.
    @Test func aLogRewrittenSinceTheLastCheckIsSaidInItsSection() {
        var sheet = Self.sheet("alice", integrity: .ownDevice)
        sheet.shares = []
        var log = VerifiedAccessLog(entries: [], checkpoint: nil)
        sheet.accessLog = log
        #expect(!DashboardPages.patient(sheet, role: .patient).contains("id=\"log-rewritten\""))
        log.rewrittenSinceLastCheck = "the log was rewritten or cut at or before entry 9 since this device last checked it"
        sheet.accessLog = log
        let page = DashboardPages.patient(sheet, role: .patient)
        #expect(page.contains("<p class=\"note\" id=\"log-rewritten\">Warning: the log was rewritten or cut at or before entry 9"))
        #expect(page.contains("Not verified: the admin has not signed an audit checkpoint yet."))
    }

    @Test func bidiControlsInPatientTextCannotReorderThePage() throws {
        let controls = ["\u{202E}", "\u{202D}", "\u{2066}", "\u{2067}", "\u{2068}", "\u{2069}", "\u{200F}", "\u{061C}"]
        for c in controls {
            let text = "Walk\(c)gnp.exe"
            let activity = try SVGChartTests.walk(title: text, instructions: text, start: Date(timeIntervalSince1970: 1_790_000_000))
            let outcome = Outcome(
                activityID: "walk",
                occurrence: 0,
                values: [OutcomeValue(value: .number(3), units: text, createdAt: Date(timeIntervalSince1970: 1_790_000_100))],
                note: text,
                createdAt: Date(timeIntervalSince1970: 1_790_000_100)
            )
            var sheet = Self.sheet(text, integrity: .failure(text))
            sheet.activities = [activity]
            sheet.outcomes = [outcome]
            let chart = SVGChart(id: "c", title: text, units: text, readings: SVGChartTests.readings([1, 2]), target: nil).render()
            for page in [
                DashboardPages.patient(sheet, role: .doctor), DashboardPages.patient(sheet, role: .patient),
                DashboardPages.triage(TriageList([sheet], order: .attention), role: .doctor), chart,
            ] {
                #expect(!page.unicodeScalars.contains { DashboardPages.isBidiControl($0) }, "U+\(String(c.unicodeScalars.first!.value, radix: 16))")
                #expect(page.contains("Walk\u{FFFD}gnp.exe"))
            }
        }
        #expect(chartTitle("Walk\u{202E}x").contains("<title id=\"c-title\">Walk\u{FFFD}x</title>"))
    }

    func chartTitle(_ title: String) -> String { SVGChart(id: "c", title: title, units: nil, readings: [], target: nil).render() }
}
