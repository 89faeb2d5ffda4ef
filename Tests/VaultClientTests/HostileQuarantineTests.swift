import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultTestSupport

@testable import VaultClient

/// A doctor's quarantine is kept per share (Docs/design.md §5): a server that moves a failed change of one
/// share into the page of another, or puts a change of the other share at its sequence, must not clear the
/// failure of the first. Before the quarantine was keyed by tresor, the other share's store overwrote or
/// released the row, and the failure was no longer reported.
@Suite("Client: a quarantined record stays with its share")
struct HostileQuarantineTests {
    @Test(arguments: Backend.allCases)
    func anotherSharesPageDoesNotReleaseAFailedRecord(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            let (vault, _) = try await QuarantineTests.patientWithThree(world, backend)
            try await vault.addActivity(try Sample.activity("mood", category: "assessments"))
            _ = try await vault.sync()
            for category in ["interventions", "assessments"] { _ = try await vault.grant(doctor: "doc", category: category) }
            try await world.approveAll()
            _ = try await vault.sync()
            let run = try await QuarantineTests.envelope(vault, "run")
            try await QuarantineTests.tamper(world, backend, run, from: QuarantineTests.breakCiphertext.from, to: QuarantineTests.breakCiphertext.to)
            let before = try await doctor.view(patient: "pat")
            #expect(before.activities.map(\.id) == ["mood", "swim", "walk"])
            let failed = try #require(before.quarantined.first)
            #expect(before.quarantined.count == 1)

            let (patient, shares) = try await doctor.verifiedShares(patient: "pat")
            let interventions = try #require(shares.first { $0.share.category == "interventions" })
            let assessments = try #require(shares.first { $0.share.category == "assessments" })
            let cache = await doctor.cache
            let transport = await doctor.transport
            let auth = try await doctor.auth
            let page = { (share: VerifiedShare, after: UInt64) in
                try await transport.pullPage(
                    query: ReplicaFeed(owner: patient.userID, tresor: share.tresor.id).query(since: after),
                    after: after,
                    auth: auth
                )
                .page
            }
            let moved = try #require(try await page(interventions, failed.sequence - 1).changes.first { $0.sequence == failed.sequence })
            let mood = try #require(try await page(assessments, 0).changes.first?.envelope)
            // The hostile server's feed of assessments: whatever it is handed, then an empty final page, so
            // every sequence the share holds aside "holds no change any more".
            let hostile = ReplicaEngine(
                feed: ReplicaFeed(owner: patient.userID, tresor: assessments.tresor.id),
                applier: SharedReplica(cache: cache, patient: patient, share: assessments)
            ) { _, after in (PulledPage(changes: [], nextCursor: after, done: true), []) }
            let attacks = [
                ("the failed change moved into the page of assessments, then gone from it", moved),
                ("a verified change of assessments at the failed change's sequence", PulledChange(sequence: failed.sequence, envelope: mood)),
            ]
            for (attack, change) in attacks {
                _ = try await hostile.receive(PulledPage(changes: [change], nextCursor: change.sequence, done: false), commitments: nil)
                _ = try await hostile.retryQuarantined()
                #expect(try await cache.quarantined(owner: patient.userID, tresor: interventions.tresor.id) == [failed], "\(attack)")
                #expect(try await cache.quarantined(owner: patient.userID, tresor: assessments.tresor.id).isEmpty, "\(attack)")
                let view = try await doctor.view(patient: "pat")
                #expect(view.quarantined == [failed], "\(attack): the failure of interventions is still reported")
                #expect(view.unconfirmed.contains("interventions"), "\(attack)")
                #expect(view.activities.map(\.id) == ["mood", "swim", "walk"], "\(attack)")
            }
        }
    }
}
