import Foundation
import Testing
import VaultClient
import VaultCore
import VaultTestSupport

/// A record stays in the tresor of the category it was first written in (Docs/design.md §4): an activity id
/// removed from one category cannot come back under another, or the first category's doctor would never
/// receive its tombstone.
@Suite("Records keep their category")
struct CategoryLockTests {
    static func refusal(_ body: () async throws -> Void) async -> String? {
        do {
            try await body()
            return nil
        } catch let ClientError.invalidRequest(message) {
            return message
        } catch {
            return "unexpected error: \(error)"
        }
    }

    @Test(arguments: Backend.allCases)
    func aRemovedActivityCannotReturnUnderAnotherCategory(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let phone = try world.device("phone")
            let (vault, password) = try await world.patient("alice", on: phone)
            let doctor = try await world.doctor("drbob", on: try world.device("doctor"))
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.recordOutcome(activityID: "walk", occurrence: 1, value: Sample.value(4200))
            _ = try await vault.grant(doctor: "drbob", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            #expect(try await doctor.view(patient: "alice").activities.map(\.id) == ["walk"])

            try await vault.removeActivity(id: "walk")
            _ = try await vault.sync()
            let queued = try await vault.pendingCount()
            let add = await Self.refusal { try await vault.addActivity(try Sample.activity("walk", category: "assessments")) }
            #expect(add == "activity 'walk' was in category 'interventions'; choose another id")
            // The import is refused as a whole: the valid new activity next to it is not written either.
            let batch = await Self.refusal {
                try await vault.importCare(
                    activities: [try Sample.activity("swim", category: "assessments"), try Sample.activity("walk", category: "assessments")],
                    outcomes: []
                )
            }
            #expect(batch == "activity 'walk' was in category 'interventions'; choose another id")
            #expect(try await vault.activity(id: "swim") == nil)
            #expect(try await vault.pendingCount() == queued, "nothing was queued")
            #expect(try await vault.category(ofActivity: "walk") == "interventions")

            // Another device learns the tombstone by sync and refuses the same.
            let laptop = try await world.device("laptop").loginPatient("alice", password: password)
            _ = try await laptop.sync()
            let elsewhere = await Self.refusal { try await laptop.addActivity(try Sample.activity("walk", category: "assessments")) }
            #expect(elsewhere == "activity 'walk' was in category 'interventions'; choose another id")

            // The same category is fine, and the doctor of the first category saw the removal.
            #expect(try await doctor.view(patient: "alice").activities.isEmpty)
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.addActivity(try Sample.activity("walk-2", category: "assessments"))
            let summary = try await vault.sync()
            #expect(summary.rejected.isEmpty)
            #expect(try await doctor.view(patient: "alice").activities.map(\.id) == ["walk"])
        }
    }

    @Test func anImportAddsUpdatesAndRecordsInOneBatch() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (vault, _) = try await world.patient("carol", on: try world.device("phone"))
            try await vault.addActivity(try Sample.activity("walk"))
            var renamed = try Sample.activity("walk", title: "Walk 45 minutes")
            renamed.createdAt = Date(unixMillis: 1)
            let outcomes = (0..<3).map { i in
                Outcome(
                    activityID: i == 2 ? "swim" : "walk",
                    occurrence: 5,
                    values: [Sample.value(Double(i))],
                    note: "n\(i)",
                    createdAt: Sample.start
                )
            }
            let added = try await vault.importCare(activities: [renamed, try Sample.activity("swim")], outcomes: outcomes)
            #expect(added == 1)
            #expect(try await vault.activity(id: "walk")?.title == "Walk 45 minutes")
            #expect(try await vault.activity(id: "walk")?.createdAt == Sample.start, "an update keeps when the activity was made")
            let walk = try await vault.outcomes(activityID: "walk")
            #expect(walk.count == 1 && walk[0].values.map(\.value) == [.number(0), .number(1)] && walk[0].note == "n1")
            #expect(try await vault.outcomes(activityID: "swim").count == 1)

            let unknown = await Self.refusal {
                try await vault.importCare(activities: [], outcomes: [Outcome(activityID: "run", occurrence: 0, createdAt: Sample.start)])
            }
            #expect(unknown == "unexpected error: not found: no activity 'run'")
        }
    }
}
