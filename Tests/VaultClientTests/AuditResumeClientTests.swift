import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// `audit checkpoint` resumes at the checkpoint the admin remembers (Docs/design.md §6): only the entries
/// after it are downloaded, and whatever makes the resumption unsafe sends it back to the full check.
@Suite("Client: the admin's checkpoint resumes at the remembered one")
struct AuditResumeClientTests {
    typealias Base = AuditCheckpointClientTests

    static func appendReads(_ world: ClientWorld, about patient: UUID, count: Int) async throws {
        for n in 0..<count {
            try await world.repository.appendAudit([AuditEvent(actor: "server", action: "records.read", patientID: patient)], now: Int64(10 + n))
        }
    }

    @Test(arguments: Backend.allCases)
    func onlyTheEntriesAfterTheRememberedCheckpointAreWalked(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            let admin = try world.adminClient
            let store = Base.store(world)
            // Nothing remembered yet: the full check.
            let first = try await admin.verifyAuditChainSinceCheckpoint(store: store)
            #expect(first.report.ok && first.report.resumedAt == nil && first.entries.first?.sequence == 1)
            let checkpoint = try await admin.checkpointAudit(store: store)

            try await Self.appendReads(world, about: patient.account.profile.userID, count: 3)
            let (report, entries) = try await admin.verifyAuditChainSinceCheckpoint(store: store)
            #expect(report.ok && report.resumedAt == checkpoint.sequence && report.entriesChecked == 3)
            #expect(entries.map(\.sequence) == Array(checkpoint.sequence...checkpoint.sequence + 3), "the anchor and the three after it")
            let next = try await admin.checkpointAudit(store: store)
            #expect(next.sequence == checkpoint.sequence + 3)
            #expect(try store.newest() == next)
            // Nothing new: the remembered checkpoint is the newest, and is returned as it is.
            #expect(try await admin.checkpointAudit(store: store) == next)
            #expect(try await admin.verifyAuditChain(store: store).report.ok, "the full check agrees")
            #expect(try await patient.verifiedAccessLog().checkpoint == next, "the patient's device verifies against it")
        }
    }

    @Test(arguments: Backend.allCases)
    func anythingThatMakesResumingUnsafeFallsBackToTheFullCheck(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            let admin = try world.adminClient
            let store = Base.store(world)
            let checkpoint = try await admin.checkpointAudit(store: store)
            let me = patient.account.profile.userID
            try await Self.appendReads(world, about: me, count: 2)
            let original = try await Base.entries(world.repository)
            let read = try #require(original.first { $0.patientID == me && $0.sequence < checkpoint.sequence })

            // An entry before the checkpoint edited in place, its stored hashes left alone: the server's own
            // check sees it, so the full check runs and names it; nothing is signed.
            var edited = original
            edited[Int(read.sequence) - 1].details["note"] = "changed"
            try await Base.replaceLog(world.repository, backend, with: edited)
            let inPlace = try await admin.verifyAuditChainSinceCheckpoint(store: store).report
            #expect(inPlace.resumedAt == nil && inPlace.broken?.reason == .editedEntry && inPlace.broken?.sequence == read.sequence)
            await #expect(throws: ClientError.self) { try await admin.checkpointAudit(store: store) }

            // The same edit rehashed through the checkpoint: the entry there no longer has the signed hash.
            try await Base.replaceLog(world.repository, backend, with: Base.rehashed(edited))
            let rehashed = try await admin.verifyAuditChainSinceCheckpoint(store: store).report
            #expect(rehashed.resumedAt == nil && rehashed.broken?.reason == .checkpointMismatch)
            #expect(rehashed.broken?.sequence == checkpoint.sequence)

            // An entry after the checkpoint edited in place: caught as by the full check.
            try await Base.replaceLog(world.repository, backend, with: original)
            var late = original
            late[late.count - 1].details["note"] = "changed"
            try await Base.replaceLog(world.repository, backend, with: late)
            let after = try await admin.verifyAuditChainSinceCheckpoint(store: store).report
            #expect(after.broken?.reason == .editedEntry && after.broken?.sequence == late.last?.sequence)

            // The checkpoint dropped from the server: the full check reports it missing.
            try await Base.replaceLog(world.repository, backend, with: original)
            try await world.repository.databaseOperator.dropAuditCheckpoints()
            let dropped = try await admin.verifyAuditChainSinceCheckpoint(store: store).report
            #expect(dropped.resumedAt == nil && dropped.broken?.reason == .checkpointMissing)
        }
    }

    /// A case only the walk here catches, the server's own check passing: an entry between the remembered
    /// checkpoint and a newer one (signed elsewhere) edited and the chain rehashed.
    @Test(arguments: Backend.allCases)
    func theWalkFromTheRememberedCheckpointHoldsTheLogToNewerCheckpoints(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            let admin = try world.adminClient
            let store = Base.store(world)
            let first = try await admin.checkpointAudit(store: store)
            try await Self.appendReads(world, about: patient.account.profile.userID, count: 2)
            let newer = try await admin.checkpointAudit(store: Base.store(world, "elsewhere"))
            var entries = try await Base.entries(world.repository)
            entries[Int(first.sequence)].details["note"] = "changed"
            try await Base.replaceLog(world.repository, backend, with: Base.rehashed(entries))
            #expect(try await admin.verifyAudit().ok, "consistent on its own")
            let report = try await admin.verifyAuditChainSinceCheckpoint(store: store).report
            #expect(report.resumedAt == first.sequence && report.broken?.reason == .checkpointMismatch)
            #expect(report.broken?.sequence == newer.sequence)
            await #expect(throws: ClientError.self) { try await admin.checkpointAudit(store: store) }
        }
    }
}
