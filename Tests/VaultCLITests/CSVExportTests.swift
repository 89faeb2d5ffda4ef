import Foundation
import Testing
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
                == "\"walk\",\"Walk, \"\"brisk\"\"\",\"interventions\",1,2026-01-02T08:00:00Z,\"4200.0\",\"steps\",2026-01-01T08:00:00Z,\"'=cmd\""
        )
    }
}
