import Foundation
import Synchronization
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// Membership under a hostile server (Docs/design.md §3): whoever controls the database rewrites share
/// and tresor rows, and the honest clients must refuse, or at least hand no key to anyone the patient
/// did not approve, and never to a member the patient removed.
@Suite("Client: a hostile server cannot change who holds the keys")
struct HostileMembershipTests {
    enum Failure: Sendable { case integrity, notPermitted }

    /// Runs `body` and records an issue unless it fails with a client error of one of `kinds`; returns the message.
    @discardableResult
    static func expectFailure(
        _ kinds: Set<Failure>,
        _ what: String,
        _ body: () async throws -> Void
    ) async -> String? {
        do {
            try await body()
            Issue.record("\(what): accepted")
        } catch let e as ClientError {
            switch e {
            case let .integrity(m) where kinds.contains(.integrity): return m
            case let .notPermitted(_, m) where kinds.contains(.notPermitted): return m
            default: Issue.record("\(what): expected \(kinds), got \(e)")
            }
        } catch { Issue.record("\(what): expected a client error, got \(error)") }
        return nil
    }

    /// The only share row of doctor `name`.
    static func shareRow(_ world: ClientWorld, doctor: DoctorReader) async throws -> ShareRow {
        let rows = try await world.repository.shares(doctorID: doctor.account.profile.userID)
        #expect(rows.count == 1)
        return try #require(rows.first)
    }

    /// The server's current epoch of `category`.
    static func serverEpoch(_ world: ClientWorld, _ vault: PatientVault, _ category: String = "interventions") async throws -> UInt32 {
        try #require(try await world.repository.tresor(id: Tresor.id(ownerID: vault.account.profile.userID, category: category))).currentEpoch
    }

    /// The ledger entry this device keeps for `shareID`.
    static func member(_ vault: PatientVault, _ shareID: UUID, _ category: String = "interventions") throws -> LedgerMember? {
        try vault.store.ledgerState(category: category)?.ledger.members[shareID]
    }

    /// Logs `name` in on a new device with an empty cache.
    static func freshReader(_ world: ClientWorld, _ name: String, device: String) async throws -> DoctorReader {
        let d = try world.device(device)
        let account = try await d.accounts.login(username: name, password: "doctor-password")
        return try DoctorReader(account: account, transport: d.transport, adminKey: world.admin.publicKey)
    }

    @Test(arguments: Backend.allCases)
    func aResurrectedRevokedShareGetsNoNewKey(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            let doc1 = try await world.doctor("doc1", on: try world.device("d1"))
            let doc2 = try await world.doctor("doc2", on: try world.device("d2"))
            try await vault.addActivity(try Sample.activity("walk", title: "before"))
            _ = try await vault.sync()
            let share1 = try await vault.grant(doctor: "doc1", category: "interventions")
            _ = try await vault.grant(doctor: "doc2", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            #expect(try await doc1.view(patient: "pat").activities.map(\.title) == ["before"])

            _ = try await vault.revoke(doctor: "doc1", category: "interventions")
            await Self.expectFailure([.notPermitted], "doc1 after its revocation") { _ = try await doc1.view(patient: "pat") }
            let held = try await Self.shareRow(world, doctor: doc1).latestGrant?.epochs
            #expect(held == [1])
            #expect(try await Self.serverEpoch(world, vault) == 2)

            // The server revives doc1's share and hides the patient's revocation.
            try await world.repository.databaseOperator.editShares(.doctor("doc1"), state: .active, forgetting: [.revocation, .reason])
            _ = try await vault.revoke(doctor: "doc2", category: "interventions")
            try await vault.addActivity(try Sample.activity("run", title: "after"))
            _ = try await vault.sync()

            #expect(try await Self.serverEpoch(world, vault) == 3)
            #expect(try await Self.shareRow(world, doctor: doc1).latestGrant?.epochs == held, "no grant of a new epoch to doc1")
            #expect(try await Self.shareRow(world, doctor: doc2).latestGrant?.epochs == [1, 2], "doc2 kept only what it had")
            #expect(try Self.member(vault, share1.shareID)?.status == .revoked)
            // The reader that saw the revocation never trusts the share again.
            await Self.expectFailure([.notPermitted], "doc1 after the resurrection") { _ = try await doc1.view(patient: "pat") }
            // A new device of doc1 believes the server, yet holds no key for what came after.
            let fresh = try await Self.freshReader(world, "doc1", device: "d1b")
            let view = try await fresh.view(patient: "pat")
            #expect(view.activities.map(\.title) == ["before"])
            #expect(view.unreadable == 1)
        }
    }

    @Test(arguments: Backend.allCases)
    func anExpiredShareGetsNoNewKeyAndTheTresorRotatesAtTheNextSync(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            // The patient's device runs on a clock the test moves past the share's end date; the server's
            // and the doctor's stay on real time, so the server keeps listing the share as active (as a
            // hostile server would) and the doctor still holds the epochs it was given before the end.
            let device = try world.device("p")
            let (first, _) = try await world.patient("pat", on: device)
            let skew = Mutex<TimeInterval>(0)
            let vault = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey) {
                Date().addingTimeInterval(skew.withLock { $0 })
            }
            let doc = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk", title: "before"))
            _ = try await vault.sync()
            let share = try await vault.grant(doctor: "doc", category: "interventions", expiresAt: Date().addingTimeInterval(3600))
            try await world.approveAll()
            _ = try await vault.sync()
            #expect(try await doc.view(patient: "pat").activities.map(\.title) == ["before"])
            #expect(try await Self.shareRow(world, doctor: doc).latestGrant?.epochs == [1])
            let before = try await Self.serverEpoch(world, vault)

            skew.withLock { $0 = 7200 }
            // The server keeps the share alive past its end date, for good.
            try await world.repository.databaseOperator.editShares(.doctor("doc"), state: .active, forgetting: [.expiry])
            _ = try await vault.sync()
            #expect(try await Self.serverEpoch(world, vault) == before + 1, "the expiry rotated the tresor")
            #expect(try Self.member(vault, share.shareID)?.status == .expired)
            #expect(try await Self.shareRow(world, doctor: doc).latestGrant?.epochs == [1], "no grant of the new epoch")
            try await vault.addActivity(try Sample.activity("run", title: "after"))
            _ = try await vault.sync()
            let seen = try await doc.view(patient: "pat")
            #expect(seen.activities.map(\.title) == ["before"] && seen.unreadable == 1, "nothing written after the end opens")

            // Revoking the expired share works; the member the tresor already rotated past needs no new epoch.
            let ended = try await vault.revoke(doctor: "doc", category: "interventions")
            #expect(ended.shares.map(\.shareID) == [share.shareID] && ended.shares.first?.state == .revoked)
            // It rotates all the same: a device cannot tell that no other device delivered a newer key since.
            #expect(ended.rotated)
            #expect(try await Self.shareRow(world, doctor: doc).revocation != nil, "the doctor is told the end by the patient")
            #expect(try Self.member(vault, share.shareID)?.status.isFinal == true)
            #expect(try await Self.serverEpoch(world, vault) == before + 2)
            await Self.expectFailure([.notPermitted], "doctor after the revocation") { _ = try await doc.view(patient: "pat") }

            // Reviving it again changes nothing.
            try await world.repository.databaseOperator.editShares(.doctor("doc"), state: .active, forgetting: [.revocation])
            try await vault.rotate(category: "interventions", reencrypt: false)
            try await vault.addActivity(try Sample.activity("swim", title: "later"))
            _ = try await vault.sync()
            #expect(try await Self.serverEpoch(world, vault) == before + 3)
            #expect(try await Self.shareRow(world, doctor: doc).latestGrant?.epochs == [1])
            let fresh = try await Self.freshReader(world, "doc", device: "d2")
            let revived = try await fresh.view(patient: "pat")
            #expect(revived.activities.map(\.title) == ["before"] && revived.unreadable == 2)
        }
    }

    @Test(arguments: Backend.allCases)
    func aDeviceServedAnOldSelfGrantRefusesToWriteUnderTheOldEpoch(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (a, password) = try await world.patient("pat", on: try world.device("a"))
            let doc = try await world.doctor("doc", on: try world.device("d"))
            try await a.addActivity(try Sample.activity("walk", title: "before"))
            _ = try await a.sync()
            _ = try await a.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await a.sync()
            let tresorID = Tresor.id(ownerID: a.account.profile.userID, category: "interventions")
            let old = try #require(try await world.repository.tresor(id: tresorID))
            let oldVersion = try #require(old.selfGrant.tresorVersion)

            _ = try await a.revoke(doctor: "doc", category: "interventions")
            try await a.addActivity(try Sample.activity("run", title: "after"))
            _ = try await a.sync()
            #expect(try await Self.serverEpoch(world, a) == old.currentEpoch + 1)

            // The server puts back the self-grant from before the revocation: the doctor holds its keys.
            try await world.repository.databaseOperator.setSelfGrant(owner: "pat", category: "interventions", old.selfGrant, epoch: old.currentEpoch)

            // (b) A new device sees only the old self-grant, but a record the patient signed under the newer
            // epoch proves that epoch exists: it writes nothing under the old one, and holds no key to declare
            // it again. A device shown neither the newer self-grant nor any record after it (a fork of
            // everything) cannot tell, and would write under the old epoch, readable by the removed doctor: the
            // documented limit of Docs/design.md §3, narrowed by every device that has seen the newer state.
            let b = try await world.device("b").loginPatient("pat", password: password)
            await Self.expectFailure([.integrity], "device B sync") { _ = try await b.sync() }
            let refused = await Self.expectFailure([.integrity], "device B write") {
                try await b.addActivity(try Sample.activity("new", title: "under the old epoch"))
            }
            #expect(refused?.contains("epoch \(old.currentEpoch + 1)") == true, "\(refused ?? "")")
            #expect(try b.store.outboxCount() == 0, "nothing waits to be sent")

            // (a) The device that saw the newer version takes nothing of the older one: it declares its own again
            // (as after a restored backup, which it cannot tell from this), naming the older version, and the
            // server holds the newer epoch once more; the removed doctor gets no key of it.
            let healed = try await a.sync()
            #expect(healed.healed.contains { $0.contains("key declaration of interventions: it shows version \(oldVersion)") }, "\(healed)")
            #expect(try await Self.serverEpoch(world, a) == old.currentEpoch + 1)
            #expect(try await Self.shareRow(world, doctor: doc).latestGrant?.epochs.contains(old.currentEpoch + 1) != true)
            // And device B, shown the newer declaration, writes under the newer epoch.
            _ = try await b.sync()
            try await b.addActivity(try Sample.activity("new", title: "under the new epoch"))
            _ = try await b.sync()
            #expect(try b.store.outboxCount() == 0)
        }
    }

    @Test(arguments: Backend.allCases)
    func aDoctorNeverApprovedOpensNothingWhateverTheServerHandsOver(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            let doc = try await world.doctor("doc", on: try world.device("d"))
            _ = try await world.doctor("doc2", on: try world.device("d2"))
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.addActivity(try Sample.activity("mood", category: "assessments"))
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: "doc2", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            let share = try await vault.grant(doctor: "doc", category: "interventions")

            // Active with no approval at all.
            try await world.repository.databaseOperator.editShares(.doctor("doc"), state: .active)
            await Self.expectFailure([.integrity, .notPermitted], "no approval") { _ = try await doc.view(patient: "pat") }
            // Active with the admin's approval of doc2's share.
            try await world.repository.databaseOperator.copyShareApproval(from: .doctor("doc2"), to: .doctor("doc"))
            #expect(try await Self.shareRow(world, doctor: doc).approval != nil)
            await Self.expectFailure([.integrity, .notPermitted], "a copied approval") { _ = try await doc.view(patient: "pat") }
            // The patient's device refuses to deliver to it.
            await Self.expectFailure([.integrity], "delivery") { _ = try await vault.sync() }
            #expect(try Self.member(vault, share.shareID)?.status == .requested)

            // Every row the server holds, opened with the doctor's identity: no key comes out.
            let me = doc.account.identity
            let patient = vault.account.certificate
            let admin = world.admin.publicKey
            var grants: [Grant] = []
            for row in try await world.repository.shares(patientID: patient.userID) {
                if row.doctorID == doc.account.profile.userID {
                    #expect(row.grant.isRequest, "the doctor's grant carries no keys")
                    #expect(row.latestGrant == nil, "no keys were delivered to the doctor")
                }
                grants += [row.grant] + (row.latestGrant.map { [$0] } ?? [])
            }
            let selfGrants = try await world.repository.tresors(ownerID: patient.userID).map(\.selfGrant)
            #expect(grants.count == 3 && selfGrants.count == 2)
            var keys: [UInt32: SymmetricKey] = [:]
            for g in grants + selfGrants {
                #expect(throws: TrustError.self) { try g.openKeys(member: me, patient: patient, adminKey: admin) }
                #expect(throws: TrustError.self) { try g.openSelfGrant(identity: me, certificate: patient, adminKey: admin) }
                if let t = try? g.openKeys(member: me, patient: patient, adminKey: admin) { keys.merge(t.keys) { a, _ in a } }
            }
            #expect(keys.isEmpty)
            let versions = try await world.repository.changes(ownerID: patient.userID, tresorID: nil, since: 0, limit: 100)
            #expect(versions.count == 2)
            for v in versions {
                let env = try Envelope(binary: v.envelope)
                #expect(throws: EnvelopeError.self) {
                    try env.open(keys: keys, authorKey: patient.signingKey, expecting: EnvelopeContext(ownerID: patient.userID))
                }
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func aForgedRevocationIsAnIntegrityErrorAndDropsNoValidShare(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            let doc = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.addActivity(try Sample.activity("mood", category: "assessments"))
            try await vault.addActivity(try Sample.activity("pill", category: "medications"))
            _ = try await vault.sync()
            let kept = try await vault.grant(doctor: "doc", category: "interventions")
            _ = try await vault.grant(doctor: "doc", category: "assessments")
            _ = try await vault.grant(doctor: "doc", category: "medications")
            try await world.approveAll()
            _ = try await vault.sync()
            #expect(try await doc.view(patient: "pat").categories == ["assessments", "interventions", "medications"])
            _ = try await vault.revoke(doctor: "doc", category: "medications")
            #expect(try await doc.view(patient: "pat").categories == ["assessments", "interventions"])
            let ended = try await world.repository.shares(doctorID: doc.account.profile.userID).first { $0.category == "medications" }
            let real = try #require(ended?.revocation)
            let target = ServerOperator.ShareRows.doctorCategory("doc", "interventions")

            let rogue = Identity.generate(userID: vault.account.profile.userID)
            let forgeries = [
                (
                    "signed by another key",
                    ShareRevocation.make(shareID: kept.shareID, request: kept.grant, patient: rogue, revokedAt: real.revokedAt)
                ),
                ("naming another share", real),
            ]
            for (what, forged) in forgeries {
                try await world.repository.databaseOperator.editShares(target, state: .revoked, revocation: forged)
                await Self.expectFailure([.integrity], what) { _ = try await doc.view(patient: "pat") }
                try await world.repository.databaseOperator.editShares(target, state: .active, forgetting: [.revocation])
                let after = try await doc.view(patient: "pat")
                #expect(after.categories == ["assessments", "interventions"], "\(what): the valid share stays")
                #expect(after.activities.map(\.id) == ["mood", "walk"], "\(what)")
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func aSubstitutedDoctorCertificateAfterTheRequestGetsNoKeys(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, password) = try await world.patient("pat", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let share = try await vault.grant(doctor: "doc", category: "interventions")
            let stored = try #require(try await world.repository.user(username: "doc")?.certificate)
            func substitute(signedBy admin: SigningKeyPair) async throws {
                let fake = try Certificate.issue(
                    userID: stored.userID,
                    username: "doc",
                    role: .doctor,
                    signingKey: stored.signingKey,
                    boxKey: BoxKeyPair.generate().publicKey,
                    issuedAt: stored.issuedAt,
                    adminKey: admin
                )
                try await world.repository.databaseOperator.setCertificate(of: "doc", fake)
            }
            try await world.approveAll()

            // A key the admin certified (a re-registration, or an admin fooled) but not the one pinned at the request.
            try await substitute(signedBy: world.admin)
            let message = await Self.expectFailure([.integrity], "admin-signed substitute") { _ = try await vault.sync() }
            #expect(message?.contains("changed") == true, "\(message ?? "")")
            #expect(try await world.repository.share(id: share.shareID)?.latestGrant == nil)
            #expect(try Self.member(vault, share.shareID)?.status == .requested)

            // A key certified by anyone else: refused by every device, pinned or not.
            try await substitute(signedBy: SigningKeyPair.generate())
            await Self.expectFailure([.integrity], "forged certificate") { _ = try await vault.sync() }
            let other = try await world.device("p2").loginPatient("pat", password: password)
            await Self.expectFailure([.integrity], "forged certificate, new device") { _ = try await other.sync() }
            #expect(try await world.repository.share(id: share.shareID)?.latestGrant == nil)
        }
    }

    @Test(arguments: Backend.allCases)
    func aWithdrawnRequestApprovedLaterGetsNoKeys(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            let doc = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let share = try await vault.grant(doctor: "doc", category: "interventions")
            let withdrawn = try await vault.revoke(doctor: "doc", category: "interventions")
            #expect(withdrawn.shares.first?.state == .revoked)
            // No device can tell that keys were never delivered (another device may have delivered them
            // after an approval this one was not shown): a withdrawn request rotates too.
            #expect(withdrawn.rotated)
            #expect(try await Self.serverEpoch(world, vault) == 2)

            // The server shows the withdrawn request as pending, and the admin approves it.
            try await world.repository.databaseOperator.editShares(.doctor("doc"), state: .pending, forgetting: [.revocation, .reason])
            try await world.approveAll()
            #expect(try await world.repository.share(id: share.shareID)?.state == .active)
            _ = try await vault.sync()
            _ = try await vault.sync()
            #expect(try await world.repository.share(id: share.shareID)?.latestGrant == nil, "no keys were delivered")
            #expect(try Self.member(vault, share.shareID)?.status == .revoked)
            let view = try await doc.view(patient: "pat")
            #expect(view.activities.isEmpty && view.awaitingKeys == ["interventions"])
        }
    }

    @Test(arguments: Backend.allCases)
    func aRevocationEndsOnlyTheDoctorNamedWhateverTheServerLabels(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            let doc1 = try await world.doctor("doc1", on: try world.device("d1"))
            _ = try await world.doctor("doc2", on: try world.device("d2"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let share = try await vault.grant(doctor: "doc1", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()

            // The server shows doc1's share under doc2's name; revoking "doc2" must not end doc1's share.
            let op = world.repository.databaseOperator
            try await op.rename("doc2", to: "tmp")
            try await op.rename("doc1", to: "doc2")
            await Self.expectFailure([.integrity], "relabelled share") { _ = try await vault.revoke(doctor: "doc2", category: "interventions") }
            try await op.rename("doc2", to: "doc1")
            try await op.rename("tmp", to: "doc2")

            #expect(try await world.repository.share(id: share.shareID)?.state == .active)
            #expect(try Self.member(vault, share.shareID)?.status == .delivered)
            #expect(try await Self.serverEpoch(world, vault) == 1, "no rotation")
            #expect(try await doc1.view(patient: "pat").activities.map(\.id) == ["walk"])
        }
    }

    @Test(arguments: Backend.allCases)
    func twoDevicesRequestingAndRevokingAtOnceEndWithOneLedger(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (a, password) = try await world.patient("pat", on: try world.device("a"))
            let doc1 = try await world.doctor("doc1", on: try world.device("d1"))
            let doc2 = try await world.doctor("doc2", on: try world.device("d2"))
            let doc3 = try await world.doctor("doc3", on: try world.device("d3"))
            try await a.addActivity(try Sample.activity("walk"))
            _ = try await a.sync()
            _ = try await a.grant(doctor: "doc1", category: "interventions")
            try await world.approveAll()
            _ = try await a.sync()
            let b = try await world.device("b").loginPatient("pat", password: password)
            _ = try await b.sync()
            _ = try await b.grant(doctor: "doc3", category: "interventions")
            try await world.approveAll()

            // A revokes doc1 while B requests doc2 (and delivers to doc3), neither having seen the other.
            async let revoked = a.revoke(doctor: "doc1", category: "interventions")
            async let requested = b.grant(doctor: "doc2", category: "interventions")
            _ = try await (revoked, requested)
            try await world.approveAll()
            for _ in 0..<2 {
                _ = try await a.sync()
                _ = try await b.sync()
            }

            let ledgerA = try #require(try a.store.ledgerState(category: "interventions")?.ledger)
            let ledgerB = try #require(try b.store.ledgerState(category: "interventions")?.ledger)
            #expect(ledgerA == ledgerB)
            let status = Dictionary(ledgerA.members.values.map { ($0.username, $0.status) }) { x, _ in x }
            #expect(status == ["doc1": .revoked, "doc2": .delivered, "doc3": .delivered])
            let top = try await Self.serverEpoch(world, a)
            #expect(top >= 2)
            #expect(try await Self.shareRow(world, doctor: doc1).latestGrant?.epochs.max() ?? 0 < top, "the revoked doctor lacks the newest epoch")
            #expect(try await Self.shareRow(world, doctor: doc2).latestGrant?.epochs.max() == top)
            #expect(try await Self.shareRow(world, doctor: doc3).latestGrant?.epochs.max() == top)
        }
    }
}
