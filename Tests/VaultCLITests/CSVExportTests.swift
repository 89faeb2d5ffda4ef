import Foundation
import Testing
import VaultClient
import VaultCore

@testable import VaultCLI

@Suite("CSV export")
struct CSVExportTests {
    @Test func oneRowPerLiveValueWithItsScheduleAndEscapedCells() throws {
        let start = Date(unixMillis: 1_767_254_400_000)  // 2026-01-01T08:00:00Z
        let utc = try #require(TimeZone(identifier: "UTC"))
        let schedule = try Schedule.dailyAtTimes(start: start, end: nil, times: [DateComponents(hour: 8, minute: 0)], timeZone: utc)
        let walk = try Activity(id: "walk", title: "Walk, \"brisk\"", category: "interventions", schedule: schedule, createdAt: start)
        let value = OutcomeValue(value: .number(4200), units: "steps", createdAt: start)
        let outcome = Outcome(activityID: "walk", occurrence: 1, values: [value], note: "=cmd", createdAt: start)
        let text = String(decoding: CSVExport.document(activities: [walk], outcomes: [outcome]), as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.first.map(String.init) == CSVExport.header)
        #expect(lines.count == 3 && lines.last == "", "a header, one row, a final newline")
        #expect(
            lines[1]
                == "\"walk\",\"Walk, \"\"brisk\"\"\",\"interventions\",1,2026-01-02T08:00:00Z,\"4200.0\",\"steps\",2026-01-01T08:00:00Z,\"'=cmd\",own-device"
        )
        // A doctor's export: each row carries its category's state; an outcome of an activity not in the file
        // carries the worst state of the view.
        let view = ViewIntegrity(categories: ["interventions": .behind, "assessments": .unconfirmed])
        let orphan = Outcome(activityID: "gone", occurrence: 2, values: [value], createdAt: start)
        let marked = String(decoding: CSVExport.document(activities: [walk], outcomes: [outcome, orphan], integrity: view), as: UTF8.self)
        let rows = marked.split(separator: "\n").dropFirst()
        #expect(rows.map { $0.split(separator: ",").last.map(String.init) } == ["behind", "unconfirmed"])
    }
}
