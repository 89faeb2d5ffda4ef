import Foundation
import Synchronization
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// A `share` event names its patient (Docs/events.md §3), and a doctor who follows many patients re-reads
/// and pulls that one patient only; without a name, or for a patient not listed, it does what it must.
@Suite("Client: a share event refreshes the patient it names")
struct DoctorWatchShareEventTests {
    /// The patients whose records the doctor read since `after` (the server's audit log is the witness).
    static func readPatients(_ world: ClientWorld, after: UInt64) async throws -> Set<UUID> {
        let entries = try await world.repository.auditEntries(after: after, limit: 100_000, patientID: nil)
        return Set(entries.filter { $0.action == "records.read" }.compactMap(\.patientID))
    }

    static func head(_ world: ClientWorld) async throws -> UInt64 {
        try await world.repository.auditEntries(after: 0, limit: 100_000, patientID: nil).last?.sequence ?? 0
    }

    @Test(arguments: Backend.allCases)
    func aShareEventPullsOnlyThePatientItNamesAndANewPatientIsFoundByTheListing(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vaults, doctor, shares) = try await AuditBatchClientTests.clinic(world)
            let (ann, bob) = (shares[0].0, shares[1].0)
            for vault in vaults { _ = try await vault.sync() }  // delivers the doctor's keys
            let watch = DoctorWatch(reader: doctor, patient: nil)
            let applied = Mutex<[String]>([])
            let report: @Sendable (AppliedChange) -> Void = { change in
                guard case let .activity(a)? = change.record else { return }
                applied.withLock { $0.append(a.id) }
            }
            #expect(try await watch.refreshAll(report: report).isEmpty)
            #expect(applied.withLock { $0.count } == 2, "both patients' one activity")

            // Bob shares another category: the event names bob; only bob is read again.
            try await vaults[1].addActivity(try Sample.activity("check-bob", category: "assessments"))
            _ = try await vaults[1].sync()
            _ = try await vaults[1].grant(doctor: "doc", category: "assessments")
            try await world.approveAll()
            _ = try await vaults[1].sync()
            var before = try await Self.head(world)
            #expect(try await watch.refreshShares(of: bob, report: report).isEmpty)
            #expect(try await Self.readPatients(world, after: before) == [bob], "ann was not pulled for bob's share")
            #expect(applied.withLock { $0.contains("check-bob") }, "bob's new category was read: \(applied.withLock { $0 })")

            // A third patient, never seen by this watch, shares: found through the patient list and read.
            let (cay, _) = try await world.patient("cay", on: try world.device("cay"))
            try await cay.addActivity(try Sample.activity("walk-cay"))
            _ = try await cay.sync()
            _ = try await cay.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await cay.sync()
            before = try await Self.head(world)
            #expect(try await watch.refreshShares(of: cay.me, report: report).isEmpty)
            #expect(try await Self.readPatients(world, after: before) == [cay.me])
            #expect(applied.withLock { $0.contains("walk-cay") })

            // A patient the doctor has no active share from (a request not approved): nothing is read.
            let (dee, _) = try await world.patient("dee", on: try world.device("dee"))
            _ = try await dee.grant(doctor: "doc", category: "interventions")
            before = try await Self.head(world)
            #expect(try await watch.refreshShares(of: dee.me, report: report).isEmpty)
            #expect(try await Self.readPatients(world, after: before).isEmpty)

            // No patient named (a server of 0.10.0): everyone is read again.
            before = try await Self.head(world)
            #expect(try await watch.refreshShares(of: nil, report: report).isEmpty)
            #expect(try await Self.readPatients(world, after: before) == [ann, bob, cay.me])
        }
    }

    @Test(arguments: Backend.allCases)
    func aRevocationNamedByItsEventStopsWatchingThatPatientOnly(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vaults, doctor, shares) = try await AuditBatchClientTests.clinic(world)
            let dropped = Mutex<[String]>([])
            let watch = DoctorWatch(reader: doctor, patient: nil) { name in dropped.withLock { $0.append(name) } }
            _ = try await watch.refreshAll(report: { _ in })
            _ = try await vaults[0].revoke(doctor: "doc", category: "interventions")
            _ = try await watch.refreshShares(of: shares[0].0, report: { _ in })
            #expect(dropped.withLock { $0 } == ["ann"])
            // Bob is still followed: a change of his is pulled.
            let before = try await Self.head(world)
            _ = try await watch.refresh(owner: shares[1].0, report: { _ in })
            #expect(try await Self.readPatients(world, after: before) == [shares[1].0])
        }
    }
}
