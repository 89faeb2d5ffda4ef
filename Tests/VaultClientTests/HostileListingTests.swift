import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// What the doctor's and the patient's tools list and call complete, against an operator who edits the
/// database under an honest server process: lists show only what verifies, a view is complete only when a
/// commitment of the patient's matches it, and a revoked request copied under a new share id is never
/// trusted or approved again.
@Suite("Client: lists and views show only what verifies")
struct HostileListingTests {
    typealias H = HostileMembershipTests

    @Test(arguments: Backend.allCases)
    func aViewWithoutItsCommitmentIsNeverCalledComplete(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let s = try await CommitmentTests.story(world, backend)
            // The operator deletes the state commitment and one record head.
            try await world.repository.databaseOperator.dropCommitments()
            try await world.repository.databaseOperator.dropRecordHead(s.run)
            let view = try await CommitmentTests.freshDoctor(world, "doc-fresh").view(patient: "pat")
            #expect(view.activities.map(\.id) == ["walk"], "the run is gone, and nothing says so but the missing commitment")
            #expect(view.asOf.isEmpty)
            #expect(view.unconfirmed == ["interventions"])
            #expect(!view.complete, "no accepted commitment matches: not complete")
            // The doctor who accepted the commitment before is told outright, and keeps the view it accepted.
            let before = try await CommitmentTests.freshDoctor(world, "doc-a").view(patient: "pat")
            #expect(before.serverBehind.first?.contains("(it shows no commitment)") == true, "\(before.serverBehind)")
            #expect(before.activities.map(\.id).sorted() == ["run", "walk"], "the run the server dropped stays in the accepted view")
            #expect(before.asOf["interventions"] != nil)
        }
    }

    @Test(arguments: Backend.allCases)
    func recordsThatContradictTheCommitmentAreKeptApart(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let s = try await CommitmentTests.story(world, backend)
            // An older version of walk, and the removed swim brought back.
            try await world.repository.databaseOperator.pointRecordHead(s.walk, at: s.walkV1)
            try await world.repository.databaseOperator.pointRecordHead(s.swim, at: s.swimLive, deleted: false)
            let view = try await CommitmentTests.freshDoctor(world, "doc-fresh").view(patient: "pat")
            #expect(view.completenessMessage != nil && !view.complete)
            #expect(view.activities.isEmpty && view.outcomes.isEmpty, "nothing unverified among the verified records")
            #expect(view.unverifiedActivities.map(\.title).sorted() == ["Walk", "Walk", "v1"], "run, the resurrected swim, the old walk")
        }
    }

    @Test(arguments: Backend.allCases)
    func listsLeaveOutSharesThatDoNotVerify(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (pat, _) = try await world.patient("pat", on: try world.device("p"))
            let (other, _) = try await world.patient("other", on: try world.device("o"))
            let doc = try await world.doctor("doc", on: try world.device("d"))
            _ = try await world.doctor("doc2", on: try world.device("d2"))
            try await pat.addActivity(try Sample.activity("walk"))
            _ = try await pat.sync()
            try await other.addActivity(try Sample.activity("swim"))
            _ = try await other.sync()
            _ = try await pat.grant(doctor: "doc2", category: "interventions")
            let foreign = try await other.grant(doctor: "doc2", category: "interventions")
            try await world.approveAll()
            _ = try await pat.sync()
            #expect(try await doc.patients().patients.isEmpty)

            // The operator files pat's share with doc2 under doc as well: doc's list must not show pat.
            try await world.repository.databaseOperator.refileShares(.patient("pat"), doctor: "doc")
            let listed = try await doc.patients()
            #expect(listed.patients.isEmpty && listed.unverified == 1)
            try await world.repository.databaseOperator.refileShares(.patient("pat"), doctor: "doc2")

            // The operator shows other's share to pat as pat's own: pat's doctors come from pat's ledger.
            #expect(try await pat.doctors().doctors.map { "\($0.doctor) \($0.category) \($0.state)" } == ["doc2 interventions active"])
            try await world.repository.databaseOperator.refileShares(.id(foreign.shareID), patient: "pat", doctor: "doc")
            let mine = try await pat.doctors()
            #expect(mine.doctors.map(\.doctor) == ["doc2"] && mine.unlisted == 1)
        }
    }

    @Test(arguments: Backend.allCases)
    func aRevokedRequestCopiedUnderANewShareIsNeitherApprovedNorTrusted(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (fay, _) = try await world.patient("fay", on: try world.device("p"))
            let drw = try await world.doctor("drw", on: try world.device("d"))
            try await fay.addActivity(try Sample.activity("walk", title: "before"))
            _ = try await fay.sync()
            let ledgerURL = world.root.appendingPathComponent("issued-certificates.json")
            let decisions = try ShareDecisionLedger(url: ShareDecisionLedger.url(besideCertificateLedger: ledgerURL))
            let admin = try AdminClient(baseURL: world.baseURL, key: world.admin, decisions: decisions)
            let share = try await fay.grant(doctor: "drw", category: "interventions")
            try await admin.approveAll()
            _ = try await fay.sync()
            #expect(try await drw.view(patient: "fay").activities.map(\.title) == ["before"])
            _ = try await fay.revoke(doctor: "drw", category: "interventions")
            await H.expectFailure([.notPermitted], "drw after the revocation") { _ = try await drw.view(patient: "fay") }

            // The operator copies the revoked request into a new pending share.
            let copy = UUID()
            try await world.repository.databaseOperator.copyShare(share.shareID, as: copy)
            // The admin who decided the request before refuses it.
            let refused = await H.expectFailure([.integrity], "the copied request") { try await admin.approveAll() }
            #expect(refused?.contains("twice") == true, "\(refused ?? "")")
            #expect(try await world.repository.share(id: copy)?.state == .pending)

            // An admin without that record (another machine) approves it; drw's tool, which saw the
            // revocation, still refuses the request under its new id.
            try await world.approveAll()
            #expect(try await world.repository.share(id: copy)?.state == .active)
            await H.expectFailure([.notPermitted], "drw after the copy was approved") { _ = try await drw.view(patient: "fay") }
            #expect(try await drw.patients().patients.isEmpty)

            // A fresh device of drw, shown both copies as active and no revocation, reads each record once.
            try await world.repository.databaseOperator.allowSeveralOpenShares()
            try await world.repository.databaseOperator.setShareState(share.shareID, .active)
            let fresh = try await H.freshReader(world, "drw", device: "d2")
            let view = try await fresh.view(patient: "fay")
            #expect(view.activities.map(\.title) == ["before"], "one copy of each record")
            #expect(view.categories == ["interventions"])
        }
    }
}
