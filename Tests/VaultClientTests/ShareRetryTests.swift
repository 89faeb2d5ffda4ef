import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultTestSupport

@testable import VaultClient

/// A share request stored by the server whose answer never reached the patient (an instance killed as it
/// answered): the transport sends it again and the server answers 409, an open share of that pair exists.
/// The clinic's workload failed a share so. The one filed for exactly this signed request is this one.
@Suite("Client: a share request sent again after its answer was lost")
struct ShareRetryTests {
    @Test func theShareFiledByTheFirstAttemptIsTakenAndNothingIsFiledTwice() async throws {
        try await HostileShareServer.run(.sqlite) { world, mode in
            let (vault, _) = try await world.patient("kira", on: try world.device("p"))
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            mode.withLockedValue {
                $0.loseNextShareAnswer = true
                $0.log = []
            }
            let share = try await vault.grant(doctor: "doc", category: "interventions")
            let posts = mode.withLockedValue { $0.log }.filter { $0 == "POST \(Routes.shares)" }.count
            #expect(posts >= 2, "the first attempt's answer was lost, the next was refused as a conflict")
            let listed = try await vault.shares()
            #expect(listed.map(\.shareID) == [share.shareID], "one share, the one the first attempt filed")
            #expect(try vault.store.ledgerState(category: "interventions")?.ledger.members[share.shareID] != nil)

            // It is the real share: approved, the doctor reads the category.
            try await world.approveAll()
            _ = try await vault.sync()
            #expect(try await doctor.view(patient: "kira").activities.map(\.id) == ["walk"])
        }
    }

    /// Another open share of the same pair (filed by another request) is a real conflict, and stays one.
    @Test func anotherOpenShareOfThePairIsStillAConflict() async throws {
        try await HostileShareServer.run(.sqlite) { world, _ in
            let (vault, _) = try await world.patient("kira", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            await #expect {
                _ = try await vault.grant(doctor: "doc", category: "interventions")
            } throws: { error in
                if case ClientError.conflict = error { return true }
                return false
            }
            #expect(try await vault.shares().count == 1)
        }
    }

    /// The share id in the server's answer is not signed: an answer naming another share of the category
    /// already in the ledger is refused, instead of leaving the new doctor out of the ledger unnoticed.
    @Test func aFiledShareUnderTheIdOfAnotherShareIsRefused() async throws {
        try await HostileShareServer.run(.sqlite) { world, mode in
            let (vault, _) = try await world.patient("kira", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            _ = try await world.doctor("doc2", on: try world.device("e"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let first = try await vault.grant(doctor: "doc", category: "interventions")
            mode.withLockedValue {
                $0.bendFiledShare = { info in
                    var bent = info
                    bent.shareID = first.shareID
                    return bent
                }
            }
            await #expect {
                _ = try await vault.grant(doctor: "doc2", category: "interventions")
            } throws: { error in
                if case ClientError.integrity = error { return true }
                return false
            }
            let members = try #require(try vault.store.ledgerState(category: "interventions")).ledger.members
            #expect(members.count == 1 && members[first.shareID]?.username == "doc", "the first share's member is untouched")
        }
    }
}
