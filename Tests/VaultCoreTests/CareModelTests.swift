import Foundation
import Testing

@testable import VaultCore

private let created = Date(timeIntervalSince1970: 1_780_000_000)

private func schedule() throws -> Schedule {
    try Schedule.dailyAtTimes(start: created, times: [DateComponents(hour: 8, minute: 0)], timeZone: TimeZone(identifier: "Europe/Berlin")!)
}

private func activity(id: String = "walk", title: String = "Evening walk", category: String = "interventions") throws -> Activity {
    try Activity(id: id, title: title, category: category, schedule: schedule(), createdAt: created)
}

@Suite("Care model")
struct CareModelTests {
    @Test(arguments: [
        ("", CareModelError.emptyID),
        (String(repeating: "w", count: 129), .idTooLong(length: 129)),
        ("walk\u{0}", .idContainsControlCharacter),
        ("walk\nmore", .idContainsControlCharacter),
        ("walk\u{85}", .idContainsControlCharacter),
    ])
    func badIDsAreRejected(id: String, error: CareModelError) {
        #expect(throws: error) { try activity(id: id) }
    }

    @Test func goodIDsAreAccepted() throws {
        for id in ["walk", "Walk 2", "blood-pressure/morning", "Ärztliche Übung", String(repeating: "é", count: 128)] {
            #expect(try activity(id: id).id == id)
        }
    }

    @Test(arguments: [
        ("", CareModelError.emptyCategory),
        (String(repeating: "a", count: 65), .categoryTooLong(length: 65)),
        ("Interventions", .invalidCategoryCharacter),
        ("care card", .invalidCategoryCharacter),
        ("care_card", .invalidCategoryCharacter),
        ("symptôme", .invalidCategoryCharacter),
    ])
    func badCategoriesAreRejected(category: String, error: CareModelError) {
        #expect(throws: error) { try activity(category: category) }
    }

    @Test func goodCategoriesAreAccepted() throws {
        for category in ["interventions", "assessments", "care-card-2", String(repeating: "a", count: 64)] {
            #expect(try activity(category: category).category == category)
        }
    }

    @Test func emptyTitlesAreRejected() {
        #expect(throws: CareModelError.emptyTitle) { try activity(title: "") }
        #expect(throws: CareModelError.emptyTitle) { try activity(title: " \n\t") }
    }

    @Test func invalidNestedValuesAreRejected() throws {
        let nan = OutcomeValue(id: "v", value: .number(.nan), createdAt: created)
        #expect(throws: CareModelError.nonFiniteNumber) {
            try Activity(id: "walk", title: "Walk", category: "interventions", schedule: schedule(), targetValues: [nan], createdAt: created)
        }
        #expect(throws: CareModelError.invalidValueID) { try OutcomeValue(id: "", value: .boolean(true), createdAt: created).validate() }
        let v = OutcomeValue(id: "v", value: .boolean(true), createdAt: created)
        #expect(throws: CareModelError.duplicateValueID) {
            try Outcome(activityID: "walk", occurrence: 0, values: [v, v], createdAt: created).validate()
        }
        #expect(throws: CareModelError.negativeOccurrence(-1)) { try Outcome(activityID: "walk", occurrence: -1, createdAt: created).validate() }
        #expect(throws: CareModelError.emptyID) { try Outcome(activityID: "", occurrence: 0, createdAt: created).validate() }
        try Outcome(activityID: "walk", occurrence: 0, values: [v], createdAt: created).validate()
    }

    @Test func outcomeValueJSONRoundTripForEveryKind() throws {
        let cases: [(OutcomeValue.Value, String)] = [
            (.number(3.5), #""value":{"number":3.5,"type":"number"}"#),
            (.text("dizzy after lunch"), #""value":{"text":"dizzy after lunch","type":"text"}"#),
            (.boolean(true), #""value":{"boolean":true,"type":"boolean"}"#),
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        for (value, expectedFragment) in cases {
            // Given a value of each kind
            let original = OutcomeValue(id: "6F1C2D0E-0000-4000-8000-000000000001", value: value, units: "mg", kind: "dose", createdAt: created)
            // When it is encoded and decoded
            let data = try encoder.encode(original)
            // Then the tagged representation is used and nothing is lost
            #expect(String(decoding: data, as: UTF8.self).contains(expectedFragment))
            #expect(try JSONDecoder().decode(OutcomeValue.self, from: data) == original)
        }
        let unknown = #"{"id":"x","value":{"type":"blob","blob":1},"createdAt":0}"#
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(OutcomeValue.self, from: Data(unknown.utf8)) }
        #expect(!OutcomeValue(value: .boolean(false), createdAt: created).id.isEmpty, "a random id by default")
    }

    @Test func activityJSONRoundTrip() throws {
        let target = OutcomeValue(id: "t", value: .number(30), units: "min", createdAt: created)
        let original = try Activity(
            id: "walk",
            title: "Evening walk",
            instructions: "Brisk pace",
            category: "interventions",
            schedule: schedule() + Schedule.allDay(start: created, timeZone: TimeZone(identifier: "Europe/Berlin")!),
            targetValues: [target],
            carePlanID: "rehab",
            userInfo: ["source": "clinic"],
            createdAt: created,
            updatedAt: created.addingTimeInterval(60)
        )
        // The envelope's payload encoding (dates as milliseconds) and the default one both round-trip.
        let encoder = JSONEncoder()
        let decoder = JSONDecoder()
        encoder.dateEncodingStrategy = .millisecondsSince1970
        decoder.dateDecodingStrategy = .millisecondsSince1970
        #expect(try decoder.decode(Activity.self, from: encoder.encode(original)) == original)
        #expect(try JSONDecoder().decode(Activity.self, from: JSONEncoder().encode(original)) == original)
        #expect(original.updatedAt == created.addingTimeInterval(60))
        #expect(try activity().updatedAt == created, "updatedAt defaults to createdAt")
    }

    @Test func outcomeJSONRoundTripWithSortedTombstones() throws {
        let value = OutcomeValue(id: "a", value: .number(1), createdAt: created)
        let outcome = Outcome(activityID: "walk", occurrence: 2, values: [value], removedValueIDs: ["z", "m", "b"], note: "ok", createdAt: created)
        let data = try JSONEncoder().encode(outcome)
        #expect(String(decoding: data, as: UTF8.self).contains(#""removedValueIDs":["b","m","z"]"#))
        #expect(try JSONDecoder().decode(Outcome.self, from: data) == outcome)
        #expect(outcome.liveValues == [value])
    }
}
