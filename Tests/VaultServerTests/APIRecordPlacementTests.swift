import Foundation
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// A record stays in the tresor it was first written to (Docs/design.md §4): a version of it signed for
/// another category's tresor is refused with its own result, the rest of the batch is stored.
@Suite("API: a record never moves between categories")
struct APIRecordPlacementTests {
    @Test(arguments: Backend.allCases)
    func aVersionNamingAnotherCategorysTresorIsRefusedAlone(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let interventions = Tresor.create(ownerID: patient.id, category: "interventions")
            let assessments = Tresor.create(ownerID: patient.id, category: "assessments")
            #expect(try await api.declareTresor(patient, interventions).status == .ok)
            #expect(try await api.declareTresor(patient, assessments).status == .ok)
            let first = try api.envelope(patient, interventions, record: "walk", payload: "{}")
            #expect(try await api.push(patient, [first]).1?.results.map(\.status) == [.stored])

            // Properly signed, in a tresor of the patient's, for the same record id: still refused.
            let moved = try api.envelope(patient, assessments, record: "walk", payload: "{}", counter: 1)
            let other = try api.envelope(patient, assessments, record: "sleep", payload: "{}")
            let (response, answer) = try await api.push(patient, [moved, other])
            #expect(response.status == .ok)
            let results = try #require(answer?.results)
            #expect(results.map(\.status) == [.rejected, .stored])
            #expect(results.first?.code == .conflict)
            #expect(results.first?.reason?.contains("never moves between categories") == true)

            let page = try api.page(try await api.pull(patient.token, tresor: assessments.id))
            #expect(page.changes.count == 1, "only the other record reached the assessments tresor")
        }
    }
}
