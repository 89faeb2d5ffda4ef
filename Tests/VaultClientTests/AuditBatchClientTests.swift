import Foundation
import Synchronization
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// Doctors' reads audited in batches (Docs/design.md §6): each read is one entry, the batch one
/// transaction, and the admin's and the patients' checks hold as for entries written one by one.
@Suite("Client: doctors' reads are audited in batches")
struct AuditBatchClientTests {
    /// A batcher whose every transaction first waits `delayMs`, as behind another instance's head lock,
    /// so that concurrent reads gather; it fails while `failing` is set.
    static func slowBatcher(delayMs: Int, failing: Flag = Flag()) -> @Sendable (any VaultRepository) -> AuditBatcher {
        { repo in
            AuditBatcher { events, now in
                try await Task.sleep(for: .milliseconds(delayMs))
                if failing.isSet { throw InjectedFailure() }
                try await repo.appendAudit(events, now: now)
            }
        }
    }

    struct InjectedFailure: Error {}

    final class Flag: Sendable {
        private let value = Mutex(false)
        var isSet: Bool { value.withLock { $0 } }
        func set(_ on: Bool) { value.withLock { $0 = on } }
    }

    /// Two patients, each sharing interventions with one doctor: the patients' vaults, the doctor, and the
    /// (patient, tresor) of each share.
    static func clinic(_ world: ClientWorld) async throws -> ([PatientVault], DoctorReader, [(UUID, UUID)]) {
        let doctor = try await world.doctor("doc", on: try world.device("d"))
        var vaults: [PatientVault] = []
        for name in ["ann", "bob"] {
            let (vault, _) = try await world.patient(name, on: try world.device(name))
            try await vault.addActivity(try Sample.activity("walk-\(name)"))
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            vaults.append(vault)
        }
        try await world.approveAll()
        let shares = try await world.repository.activeShares(doctorID: doctor.account.profile.userID, now: Date().unixMillis)
        return (vaults, doctor, shares.map { ($0.patientID, $0.tresorID) })
    }

    /// One page of the doctor's pull of a shared tresor after `since`, as the doctor's device asks for it.
    static func pull(_ doctor: DoctorReader, _ share: (UUID, UUID), since: UInt64 = 0) async throws -> Int {
        let query = "?owner=\(share.0.uuidString)&tresor=\(share.1.uuidString)&since=\(since)&limit=100"
        return try await (await doctor.transport).pullPage(query: query, after: since, auth: try await doctor.auth).page.changes.count
    }

    static func reads(_ repo: any VaultRepository) async throws -> [AuditEntry] {
        try await repo.auditEntries(after: 0, limit: 100_000, patientID: nil).filter { $0.action == "records.read" }
    }

    @Test(arguments: Backend.allCases)
    func fiftyConcurrentReadsAreEachOneEntryInFewerTransactions(backend: Backend) async throws {
        try await ClientWorld.run(backend, batcher: Self.slowBatcher(delayMs: 50)) { world in
            let (vaults, doctor, shares) = try await Self.clinic(world)
            #expect(shares.count == 2)
            let batcher = try #require(world.auditBatcher)
            let before = (transactions: await batcher.transactions, events: await batcher.events)
            let pulled = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<50 { group.addTask { try await Self.pull(doctor, shares[i % 2]) } }
                return try await group.reduce(0, +)
            }
            #expect(pulled == 50, "each page holds the patient's one record")
            let transactions = await batcher.transactions - before.transactions
            #expect(await batcher.events - before.events == 50)
            #expect(transactions < 50, "the reads were appended in \(transactions) transactions")

            let reads = try await Self.reads(world.repository)
            for (patient, _) in shares { #expect(reads.filter { $0.patientID == patient }.count == 25) }
            let server = try await world.adminClient.verifyAudit()
            #expect(server.ok, "the server's check: \(server.problem ?? "")")
            let store = AuditCheckpointStore(url: world.root.appendingPathComponent("admin/audit-checkpoint.json"))
            let report = try await world.adminClient.verifyAuditChain(store: store).report
            #expect(report.ok)
            _ = try await world.adminClient.checkpointAudit(store: store)
            // Each patient's device walks the links: reads about it in one batch link one to the next.
            for vault in vaults {
                let log = try await vault.verifiedAccessLog()
                #expect(log.entries.filter { $0.action == "records.read" }.count == 25)
                #expect(log.checkpoint != nil)
            }

            // An empty page (nothing after the cursor) is one entry too, of count 0 (Docs/design.md §6).
            #expect(try await Self.pull(doctor, shares[0], since: 1_000_000) == 0)
            let empty = try await Self.reads(world.repository)
            #expect(empty.count == 51 && empty.last?.details["count"] == "0" && empty.last?.patientID == shares[0].0)
        }
    }

    @Test(arguments: Backend.allCases)
    func aFailedBatchFailsEveryReadInItAndTheNextBatchWorks(backend: Backend) async throws {
        let failing = Flag()
        try await ClientWorld.run(backend, batcher: Self.slowBatcher(delayMs: 20, failing: failing)) { world in
            let (vaults, doctor, shares) = try await Self.clinic(world)
            let readsBefore = try await Self.reads(world.repository).count
            failing.set(true)
            let outcomes = await withTaskGroup(of: Bool.self) { group in
                for i in 0..<10 { group.addTask { (try? await Self.pull(doctor, shares[i % 2])) != nil } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.allSatisfy { !$0 }, "no page goes out unaudited")
            #expect(try await Self.reads(world.repository).count == readsBefore)

            failing.set(false)
            #expect(try await Self.pull(doctor, shares[0]) == 1)
            #expect(try await Self.reads(world.repository).count == readsBefore + 1)
            #expect(try await world.adminClient.verifyAudit().ok)
            _ = try await vaults[0].verifiedAccessLog()
        }
    }
}
