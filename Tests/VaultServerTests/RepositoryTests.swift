import Foundation
import NIOConcurrencyHelpers
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// One suite, both backends: the SQLite and PostgreSQL repositories must behave the same.
@Suite("Repository (both backends)")
struct RepositoryTests {
    @Test(arguments: Backend.allCases)
    func usersAreUniqueCaseInsensitivelyAndDecidedOnce(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let alice = try Fixtures.userRow("alice")
            try await repo.insertUser(alice, audit: Fixtures.audit)
            await #expect(throws: RepositoryError.conflict("username or user id already registered")) {
                try await repo.insertUser(try Fixtures.userRow("alice"), audit: Fixtures.audit)
            }
            var sameID = try Fixtures.userRow("other")
            sameID.id = alice.id
            await #expect(throws: RepositoryError.self) { try await repo.insertUser(sameID, audit: Fixtures.audit) }
            #expect(try await repo.user(username: "alice")?.registration == alice.registration)
            #expect(try await repo.user(id: alice.id)?.status == .pending)

            let active = try await repo.decide(alice.id, .active, reason: nil, now: 5)
            #expect(active.status == .active && active.updatedAt == 5)
            await #expect(throws: RepositoryError.invalidTransition(from: "active", to: "rejected")) {
                _ = try await repo.decide(alice.id, .rejected, reason: "x", now: 6)
            }
            await #expect(throws: RepositoryError.notFound("user")) {
                _ = try await repo.decide(UUID(), .active, reason: nil, now: 6)
            }

            try await repo.insertSession(SessionRow(tokenHash: "h1", userID: alice.id, createdAt: 10, expiresAt: 20))
            #expect(try await repo.session(tokenHash: "h1")?.userID == alice.id)
            try await repo.deleteSession(tokenHash: "h1")
            #expect(try await repo.session(tokenHash: "h1") == nil)
        }
    }

    @Test(arguments: Backend.allCases)
    func tresorEpochsOnlyMoveForward(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let world = try await ShareWorld.make(repo)
            #expect(try await repo.tresor(id: world.tresor.id)?.currentEpoch == 1)
            // A newer self-grant of the same epoch is stored, but audited as no new epoch.
            let before = try await repo.auditHead().sequence
            var again = world.tresorRow
            again.selfGrant.tresorVersion = (again.selfGrant.tresorVersion ?? 0) + 1
            _ = try await repo.upsertTresor(again, audit: Fixtures.audit)
            #expect(try await repo.tresor(id: world.tresor.id)?.selfGrant.tresorVersion == again.selfGrant.tresorVersion)
            #expect(try await repo.auditHead().sequence == before, "the same epoch declared again is not a new epoch")
            var two = world.tresorRow
            two.currentEpoch = 2
            two.selfGrant.tresorVersion = (again.selfGrant.tresorVersion ?? 0) + 1
            _ = try await repo.upsertTresor(two, audit: Fixtures.audit)
            #expect(try await repo.auditHead().sequence == before + 1, "a new epoch is audited")
            await #expect(throws: RepositoryError.self) { _ = try await repo.upsertTresor(world.tresorRow, audit: Fixtures.audit) }
            #expect(try await repo.tresors(ownerID: world.patient.id).map(\.currentEpoch) == [2])
        }
    }

    @Test(arguments: Backend.allCases)
    func shareStateMachineIsOneRowAndAtomic(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let world = try await ShareWorld.make(repo)
            let share = world.shareRow(expiresAt: nil)
            try await repo.insertShare(share, audit: Fixtures.audit)
            // A second open share of the same patient, doctor and tresor is refused by the schema.
            await #expect(throws: RepositoryError.self) { try await repo.insertShare(world.shareRow(expiresAt: nil), audit: Fixtures.audit) }

            let active = try await repo.move(share.id, from: [.pending], to: .active, reason: nil, now: 10)
            #expect(active.state == .active)
            await #expect(throws: RepositoryError.invalidTransition(from: "active", to: "active")) {
                _ = try await repo.move(share.id, from: [.pending], to: .active, reason: nil, now: 11)
            }
            let revoked = try await repo.move(share.id, from: [.active], to: .revoked, reason: "bye", now: 12)
            #expect(revoked.state == .revoked && revoked.reason == "bye")
            await #expect(throws: RepositoryError.invalidTransition(from: "revoked", to: "active")) {
                _ = try await repo.move(share.id, from: [.pending, .active], to: .active, reason: nil, now: 13)
            }
            #expect(try await repo.share(id: share.id)?.state == .revoked, "a refused transition changes nothing")
            // After revocation a new share of the same category may be requested.
            try await repo.insertShare(world.shareRow(expiresAt: 100), audit: Fixtures.audit)
            #expect(try await repo.shares(patientID: world.patient.id).count == 2)
        }
    }

    /// The upgrade to key-less requests drops pending requests that carry keys (version-1 grants) and
    /// keeps everything else.
    @Test(arguments: Backend.allCases)
    func theUpgradeDropsPendingRequestsThatCarryKeys(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let world = try await ShareWorld.make(repo)
            func legacy() -> ShareRow {
                var row = world.shareRow(expiresAt: nil)
                row.grant.version = 1
                row.grant.tresorVersion = nil
                return row
            }
            let waiting = legacy()
            try await repo.insertShare(waiting, audit: Fixtures.audit)
            try await repo.attackerExecutes(Schema.dropPendingRequestsWithKeys)
            #expect(try await repo.share(id: waiting.id) == nil, "a pending request with keys is gone")
            let approved = legacy()
            try await repo.insertShare(approved, audit: Fixtures.audit)
            _ = try await repo.move(approved.id, from: [.pending], to: .active, reason: nil, now: 5)
            try await repo.attackerExecutes(Schema.dropPendingRequestsWithKeys)
            #expect(try await repo.share(id: approved.id)?.state == .active, "an approved share stays")
            _ = try await repo.move(approved.id, from: [.active], to: .revoked, reason: nil, now: 6)
            let current = world.shareRow(expiresAt: 7)
            try await repo.insertShare(current, audit: Fixtures.audit)
            try await repo.attackerExecutes(Schema.dropPendingRequestsWithKeys)
            #expect(try await repo.share(id: current.id)?.state == .pending, "a version-2 request stays")
        }
    }

    @Test(arguments: Backend.allCases)
    func expiredSharesEndOnTime(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let world = try await ShareWorld.make(repo)
            let share = world.shareRow(expiresAt: 1_000)
            try await repo.insertShare(share, audit: Fixtures.audit)
            _ = try await repo.move(share.id, from: [.pending], to: .active, reason: nil, now: 10)
            #expect(try await repo.expireShares(now: 999).isEmpty)
            #expect(try await repo.expireShares(now: 1_000).map(\.id) == [share.id])
            #expect(try await repo.share(id: share.id)?.state == .expired)
            #expect(try await repo.expireShares(now: 2_000).isEmpty)
            // A pending share whose date passes before approval is closed, and a new one may be requested.
            let late = world.shareRow(expiresAt: 3_000)
            try await repo.insertShare(late, audit: Fixtures.audit)
            _ = try await repo.expireShares(now: 3_000)
            let closed = try await repo.share(id: late.id)
            #expect(closed?.state == .rejected && closed?.reason == "expired before approval")
            // Both backends record the server's expiry events with the same actions and details.
            let server = try await repo.auditEntries(after: 0, limit: 100, patientID: world.patient.id).filter { $0.actor == "server" }
            #expect(server.map(\.action) == ["share.expired", "share.rejected"])
            #expect(
                server.first?.details == [
                    "share": share.id.uuidString.lowercased(), "doctor": world.doctor.id.uuidString.lowercased(),
                    "category": "interventions",
                ]
            )
            #expect(
                server.last?.details == [
                    "share": late.id.uuidString.lowercased(), "category": "interventions",
                    "reason": "expired before approval",
                ]
            )
            try await repo.insertShare(world.shareRow(expiresAt: nil), audit: Fixtures.audit)
        }
    }

    @Test(arguments: Backend.allCases)
    func versionsAreAppendOnlyIdempotentAndHeadsFollowLastWriterWins(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let owner = try await Fixtures.owner(repo)
            let tresor = UUID()
            let v1 = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 100)
            #expect(try await repo.storeVersions(ownerID: owner, [v1]) == [.stored(sequence: 1)])
            #expect(try await repo.storeVersions(ownerID: owner, [v1]) == [.duplicate], "the same version twice is one version")
            let older = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 50)
            #expect(try await repo.storeVersions(ownerID: owner, [older]) == [.stored(sequence: nil)], "an older version is kept but does not win")
            let newer = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 100, counter: 1)
            let otherRecord = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 1)
            #expect(
                try await repo.storeVersions(ownerID: owner, [newer, otherRecord, newer])
                    == [.stored(sequence: 2), .stored(sequence: 3), .duplicate]
            )
            // An exact tie on the clock: the tombstone wins, whichever arrives first.
            let tieLive = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 5, device: "d9")
            let tieDead = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 5, device: "d9", deleted: true)
            #expect(try await repo.storeVersions(ownerID: owner, [tieDead, tieLive]) == [.stored(sequence: 4), .stored(sequence: nil)])

            let changes = try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100)
            #expect(changes.map(\.sequence) == [2, 4])
            #expect(changes.map(\.envelope) == [newer.envelope, tieDead.envelope])
            #expect(try await repo.changes(ownerID: owner, tresorID: nil, since: 2, limit: 100).map(\.sequence) == [4])
            #expect(try await repo.changes(ownerID: owner, tresorID: UUID(), since: 0, limit: 100).isEmpty)
            #expect(try await repo.changes(ownerID: UUID(), tresorID: nil, since: 0, limit: 100).isEmpty, "owners never see each other's changes")
            #expect(try await repo.lastChange(ownerID: owner, tresorID: tresor) != nil)
            // Append-only: the store refuses to rewrite history even for someone with SQL access through the app's role.
            await #expect(throws: (any Error).self) { try await repo.attackerExecutes("DELETE FROM versions") }
        }
    }

    @Test(arguments: Backend.allCases)
    func concurrentPushesPageFromZeroExactlyOnce(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let owner = try await Fixtures.owner(repo)
            let tresor = UUID()
            let writers = 6
            let batches = 15
            let perBatch = 20
            // A reader follows the cursor while the writers push; it must neither skip nor repeat a change.
            // It reads until the writers are done and a page after that is empty, however long that takes
            // on a loaded machine (no deadline to miss).
            let writersDone = NIOLockedValueBox(false)
            async let seenWhileWriting: [String] = {
                var cursor: UInt64 = 0
                var seen: [String] = []
                while true {
                    let finished = writersDone.withLockedValue { $0 }
                    let page = try await repo.changes(ownerID: owner, tresorID: nil, since: cursor, limit: 37)
                    for c in page {
                        #expect(c.sequence > cursor)
                        cursor = c.sequence
                        seen.append(String(decoding: c.envelope, as: UTF8.self))
                    }
                    if page.isEmpty {
                        if finished { break }
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
                return seen
            }()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for w in 0..<writers {
                    group.addTask {
                        for b in 0..<batches {
                            let batch = (0..<perBatch).map { i in
                                Fixtures.version(
                                    owner: owner,
                                    record: "w\(w)-b\(b)-i\(i)",
                                    tresor: tresor,
                                    physical: Int64(b * 1000 + i),
                                    device: "dev\(w)"
                                )
                            }
                            _ = try await repo.storeVersions(ownerID: owner, batch)
                        }
                    }
                }
                try await group.waitForAll()
            }
            writersDone.withLockedValue { $0 = true }
            let during = try await seenWhileWriting
            #expect(during.count == writers * batches * perBatch)
            #expect(Set(during).count == during.count, "no change delivered twice")

            var cursor: UInt64 = 0
            var all: [UInt64] = []
            while true {
                let page = try await repo.changes(ownerID: owner, tresorID: nil, since: cursor, limit: 100)
                if page.isEmpty { break }
                all += page.map(\.sequence)
                cursor = page.last!.sequence
            }
            #expect(all == Array(1...UInt64(writers * batches * perBatch)), "sequences are gap-free and each change appears once")
        }
    }

    @Test(arguments: Backend.allCases)
    func auditChainDetectsEditedAndDeletedRows(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let patient = UUID()
            for i in 0..<5 {
                try await repo.appendAudit(
                    [
                        AuditEvent(
                            actor: "a\(i)",
                            action: "records.read",
                            patientID: i.isMultiple(of: 2) ? patient : nil,
                            details: ["n": String(i)]
                        )
                    ],
                    now: Int64(i)
                )
            }
            #expect(try await repo.verifyAudit() == AuditVerification(ok: true, entriesChecked: 5, brokenAt: nil, problem: nil))
            #expect(try await repo.auditEntries(after: 0, limit: 10, patientID: patient).map(\.sequence) == [1, 3, 5])
            // The log refuses ordinary edits...
            await #expect(throws: (any Error).self) { try await repo.attackerExecutes("UPDATE audit_log SET actor = 'x' WHERE sequence = 2") }
            // ...and someone who disables that still cannot edit without verification noticing.
            try await repo.databaseOperator.dropGuard(of: .auditLog)
            try await repo.databaseOperator.editAuditDetails(sequence: 3, ["n": "9"])
            let edited = try await repo.verifyAudit()
            #expect(!edited.ok && edited.brokenAt == 3)
            try await repo.databaseOperator.editAuditDetails(sequence: 3, ["n": "2"])
            #expect(try await repo.verifyAudit().ok)
            try await repo.databaseOperator.deleteAuditEntry(sequence: 2)
            let deleted = try await repo.verifyAudit()
            #expect(!deleted.ok && deleted.brokenAt == 2)
        }
    }

    @Test(arguments: Backend.allCases)
    func deletingTheNewestAuditRowIsCaughtByTheHead(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            try await repo.appendAudit([Fixtures.audit, Fixtures.audit, Fixtures.audit], now: 1)
            try await repo.databaseOperator.dropGuard(of: .auditLog)
            try await repo.databaseOperator.deleteAuditEntry(sequence: 3)
            let result = try await repo.verifyAudit()
            #expect(!result.ok && result.brokenAt == 3)
        }
    }

    @Test(arguments: Backend.allCases)
    func adminSignaturesAreAcceptedOnce(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let first = try await repo.rememberAdminSignature("sig", at: 10, purgeBefore: 0)
            let second = try await repo.rememberAdminSignature("sig", at: 11, purgeBefore: 0)
            #expect(first && !second)
            let secret = try await repo.serverSecret()
            let again = try await repo.serverSecret()
            #expect(secret.count == 32 && secret == again, "the secret is stable")
        }
    }
}

/// A patient, a doctor and the patient's tresor, stored.
struct ShareWorld {
    let patient: UserRow
    let doctor: UserRow
    let tresor: Tresor
    let tresorRow: TresorRow
    let grant: Grant

    static func make(_ repo: any VaultRepository) async throws -> ShareWorld {
        let admin = SigningKeyPair.generate()
        let pid = Identity.generate()
        let did = Identity.generate()
        let patient = try Fixtures.userRow("pat-\(UUID().uuidString.prefix(6).lowercased())", role: .patient, id: pid)
        let doctor = try Fixtures.userRow("doc-\(UUID().uuidString.prefix(6).lowercased())", role: .doctor, id: did)
        try await repo.insertUser(patient, audit: Fixtures.audit)
        try await repo.insertUser(doctor, audit: Fixtures.audit)
        let tresor = Tresor.create(ownerID: pid.userID, category: "interventions")
        let dcert = try Certificate.issue(
            userID: did.userID,
            username: doctor.username,
            role: .doctor,
            signingKey: did.signing.publicKey,
            boxKey: did.box.publicKey,
            issuedAt: 1,
            adminKey: admin
        )
        let pcert = try Certificate.issue(
            userID: pid.userID,
            username: patient.username,
            role: .patient,
            signingKey: pid.signing.publicKey,
            boxKey: pid.box.publicKey,
            issuedAt: 1,
            adminKey: admin
        )
        let selfGrant = try Grant.make(patient: pid, member: pcert, adminKey: admin.publicKey, tresor: tresor, createdAt: 1)
        let row = TresorRow(id: tresor.id, ownerID: pid.userID, category: "interventions", currentEpoch: 1, selfGrant: selfGrant, updatedAt: 1)
        _ = try await repo.upsertTresor(row, audit: Fixtures.audit)
        let grant = try Grant.make(patient: pid, member: dcert, adminKey: admin.publicKey, tresor: tresor, createdAt: 2)
        return ShareWorld(patient: patient, doctor: doctor, tresor: tresor, tresorRow: row, grant: grant)
    }

    func shareRow(expiresAt: UnixMillis?) -> ShareRow {
        ShareRow(
            id: UUID(),
            patientID: patient.id,
            doctorID: doctor.id,
            tresorID: tresor.id,
            category: "interventions",
            state: .pending,
            grant: grant,
            approval: nil,
            reason: nil,
            createdAt: 3,
            updatedAt: 3,
            expiresAt: expiresAt
        )
    }
}

extension VaultRepository {
    /// Decides a pending user without certificate or approval, audited with the fixture event.
    func decide(_ id: UUID, _ status: AccountStatus, reason: String?, now: UnixMillis) async throws -> UserRow {
        try await decideUser(id: id, status: status, certificate: nil, approval: nil, reason: reason, now: now, audit: Fixtures.audit)
    }

    /// Moves a share without an approval, audited with the fixture event.
    func move(_ id: UUID, from: Set<ShareState>, to: ShareState, reason: String?, now: UnixMillis) async throws -> ShareRow {
        try await transitionShare(id: id, from: from, to: to, approval: nil, reason: reason, now: now, audit: Fixtures.audit)
    }
}
