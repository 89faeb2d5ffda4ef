import Foundation
import NIOConcurrencyHelpers
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// Revocation against an operator who edits the database under an honest server process (Docs/design.md
/// §3.1): the patient's own ledger decides what a revocation ends, and a device that cannot tell whether a
/// doctor holds keys assumes it does, so a revoked doctor never reads what is written afterwards.
@Suite("Client: a hostile server cannot divert or defuse a revocation")
struct HostileRevocationTests {
    typealias H = HostileMembershipTests

    /// The share row's revocation as SQL text, to put back what the operator removed.
    @Test(arguments: Backend.allCases)
    func aRevocationDivertedToAnEndedShareIsRefused(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("fay", on: try world.device("p"))
            let drx = try await world.doctor("drx", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk", title: "before"))
            _ = try await vault.sync()
            let first = try await vault.grant(doctor: "drx", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            #expect(try await vault.revoke(doctor: "drx", category: "interventions").rotated)
            let second = try await vault.grant(doctor: "drx", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            #expect(try await H.serverEpoch(world, vault) == 2)
            #expect(try await drx.view(patient: "fay").activities.map(\.title) == ["before"])
            let firstRevocation = try #require(try await world.repository.share(id: first.shareID)?.revocation)

            // The operator hides the current share from the patient (files it under the doctor's own id) and
            // shows the old, revoked share as active again, its revocation removed.
            try await world.repository.databaseOperator.refileShares(.id(second.shareID), patient: "drx")
            try await world.repository.databaseOperator.setShareState(first.shareID, .active)
            let message = await H.expectFailure([.integrity], "revocation diverted to the ended share") {
                _ = try await vault.revoke(doctor: "drx", category: "interventions")
            }
            #expect(message?.contains("nothing was revoked") == true, "\(message ?? "")")
            #expect(try H.member(vault, second.shareID)?.status == .delivered, "the ledger still holds the current share open")
            #expect(try H.member(vault, first.shareID)?.status == .revoked)

            // Once the server shows the truth again, the revocation ends the current share and rotates.
            try await world.repository.databaseOperator.editShares(.id(first.shareID), state: .revoked, revocation: firstRevocation)
            try await world.repository.databaseOperator.refileShares(.id(second.shareID), patient: "fay")
            let done = try await vault.revoke(doctor: "drx", category: "interventions")
            #expect(done.shares.map(\.shareID) == [second.shareID] && done.rotated && done.epoch == 3)
            try await vault.addActivity(try Sample.activity("run", title: "after"))
            _ = try await vault.sync()
            // Even with the share shown as active to the doctor again, nothing written after opens.
            try await world.repository.databaseOperator.setShareState(second.shareID, .active)
            let fresh = try await H.freshReader(world, "drx", device: "d2")
            let view = try await fresh.view(patient: "fay")
            #expect(view.activities.map(\.title) == ["before"] && view.unreadable == 1)
        }
    }

    @Test(arguments: Backend.allCases)
    func aWithheldDeliveryStillRotatesAtTheRevocation(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (a, password) = try await world.patient("fay", on: try world.device("a"))
            let drx = try await world.doctor("drx", on: try world.device("d"))
            try await a.addActivity(try Sample.activity("walk", title: "before"))
            _ = try await a.sync()
            let share = try await a.grant(doctor: "drx", category: "interventions")
            let tresorID = Tresor.id(ownerID: a.account.profile.userID, category: "interventions")
            let seenByA = try #require(try await world.repository.tresor(id: tresorID))
            try await world.approveAll()

            // Device B delivers the keys after the approval; the operator keeps showing device A its own
            // older self-grant, where the doctor is only "requested".
            let b = try await world.device("b").loginPatient("fay", password: password)
            _ = try await b.sync()
            #expect(try await H.shareRow(world, doctor: drx).latestGrant?.epochs == [1], "B delivered the keys")
            #expect(try await drx.view(patient: "fay").activities.map(\.title) == ["before"])
            try await world.repository.databaseOperator.setSelfGrant(
                owner: "fay",
                category: "interventions",
                seenByA.selfGrant,
                epoch: seenByA.currentEpoch
            )
            #expect(try H.member(a, share.shareID)?.status == .requested, "A was never shown the delivery")

            let revocation = try await a.revoke(doctor: "drx", category: "interventions")
            #expect(revocation.rotated, "A cannot tell that the keys were not delivered, so it rotates")
            #expect(try await H.serverEpoch(world, a) == 2)
            try await a.addActivity(try Sample.activity("run", title: "after"))
            _ = try await a.sync()

            // The operator hides the revocation from the doctor: what was written after still does not open.
            try await world.repository.databaseOperator.setShareState(share.shareID, .active)
            let fresh = try await H.freshReader(world, "drx", device: "d2")
            let view = try await fresh.view(patient: "fay")
            #expect(view.activities.map(\.title) == ["before"] && view.unreadable == 1)
        }
    }

    @Test(arguments: Backend.allCases)
    func aRevocationNeverDeliversKeysToTheDoctorItEnds(backend: Backend) async throws {
        try await HostileShareServer.run(backend) { world, mode in
            let (fay, _) = try await world.patient("fay", on: try world.device("p"))
            _ = try await world.doctor("drx", on: try world.device("d"))
            try await fay.addActivity(try Sample.activity("walk"))
            _ = try await fay.sync()
            let share = try await fay.grant(doctor: "drx", category: "interventions")
            try await world.approveAll()
            let approved = try #require(try await fay.shares().first { $0.shareID == share.shareID })
            #expect(approved.state == .active && approved.approval != nil)

            // The server shows the patient the request as still pending while it is withdrawn, then, once the
            // revocation is in, as approved and open again.
            mode.withLockedValue { m in
                m.bend = { list in
                    var list = list
                    for i in list.shares.indices where list.shares[i].shareID == share.shareID {
                        if list.shares[i].revocation == nil {
                            list.shares[i].state = .pending
                            list.shares[i].approval = nil
                        } else {
                            list.shares[i] = approved
                        }
                    }
                    return list
                }
                m.log = []
            }
            let revocation = try await fay.revoke(doctor: "drx", category: "interventions")
            let sent = mode.withLockedValue { $0.log }
            #expect(!sent.contains("PUT " + Routes.shareGrant(share.shareID.uuidString.lowercased())), "no keys sealed to drx: \(sent)")
            #expect(!sent.contains { $0.hasPrefix("PUT ") && $0.hasSuffix("/grant") }, "\(sent)")
            #expect(revocation.rotated && revocation.epoch == 2)
            #expect(try await world.repository.share(id: share.shareID)?.latestGrant == nil)
            #expect(try H.member(fay, share.shareID)?.status == .revoked)
        }
    }

    @Test(arguments: Backend.allCases)
    func anInterruptedRevocationIsFinishedByTheNextSync(backend: Backend) async throws {
        try await HostileShareServer.run(backend) { world, mode in
            let (fay, _) = try await world.patient("fay", on: try world.device("p"))
            let drx = try await world.doctor("drx", on: try world.device("d"))
            try await fay.addActivity(try Sample.activity("walk", title: "before"))
            _ = try await fay.sync()
            let share = try await fay.grant(doctor: "drx", category: "interventions")
            try await world.approveAll()
            _ = try await fay.sync()
            #expect(try await drx.view(patient: "fay").activities.map(\.title) == ["before"])

            // The server refuses the revocation: nothing is revoked on the server, but the device has decided.
            mode.withLockedValue { $0.failRevocations = true }
            await #expect(throws: ClientError.self) { _ = try await fay.revoke(doctor: "drx", category: "interventions") }
            #expect(try H.member(fay, share.shareID)?.status == .revoked)
            #expect(try fay.store.owedRevocations().map(\.shareID) == [share.shareID])
            #expect(try fay.store.owedRotations() == ["interventions"])

            // While the server keeps refusing, a sync still rotates: the doctor gets nothing newer.
            _ = try await fay.sync()
            #expect(try await H.serverEpoch(world, fay) == 2)
            #expect(try fay.store.owedRotations().isEmpty)
            try await fay.addActivity(try Sample.activity("run", title: "after"))
            _ = try await fay.sync()
            let open = try await drx.view(patient: "fay")
            #expect(open.activities.map(\.title) == ["before"] && open.unreadable == 1)

            // Once the server takes statements again, the next sync sends the owed one.
            mode.withLockedValue { $0.failRevocations = false }
            _ = try await fay.sync()
            #expect(try fay.store.owedRevocations().isEmpty)
            #expect(try await world.repository.share(id: share.shareID)?.state == .revoked)
            await H.expectFailure([.notPermitted], "drx after the revocation") { _ = try await drx.view(patient: "fay") }
        }
    }
}
