import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// The server (or whoever controls its database) turns hostile. Every attack must end in an integrity
/// error with nothing of the attacked record applied, or a refusal: never in wrong data shown to a user.
@Suite("Client: a hostile server is caught")
struct MaliciousServerTests {
    static func allowTampering(_ repo: any VaultRepository, _ backend: Backend) async throws {
        try await repo.databaseOperator.dropGuard(of: .versions)
    }

    /// Makes a stored head be delivered again at a new sequence number.
    static func redeliver(_ repo: any VaultRepository, owner: UUID, recordID: String, versionID: String) async throws {
        let next = try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100_000).map(\.sequence).max()! + 1
        try await repo.databaseOperator.pointRecordHead(recordID, at: versionID, sequence: next)
    }

    /// Two synced devices of one patient with one activity.
    static func twoDevices(_ world: ClientWorld, _ name: String) async throws -> (PatientVault, PatientVault) {
        let a = try world.device("a")
        let b = try world.device("b")
        let (vaultA, password) = try await world.patient(name, on: a)
        try await vaultA.addActivity(try Sample.activity("walk", title: "v1"))
        _ = try await vaultA.sync()
        let vaultB = try await b.loginPatient(name, password: password)
        _ = try await vaultB.sync()
        return (vaultA, vaultB)
    }

    @Test(arguments: Backend.allCases)
    func aSubstitutedDoctorKeyIsCaughtBeforeAnythingIsSealed(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            // The server hands out a certificate for "doc" carrying its own box key, signed by its own key.
            let stored = try #require(try await world.repository.user(username: "doc")?.certificate)
            let rogue = SigningKeyPair.generate()
            let fake = try Certificate.issue(
                userID: stored.userID,
                username: "doc",
                role: .doctor,
                signingKey: stored.signingKey,
                boxKey: BoxKeyPair.generate().publicKey,
                issuedAt: stored.issuedAt,
                adminKey: rogue
            )
            try await world.repository.databaseOperator.setCertificate(of: "doc", fake)
            await #expect(throws: ClientError.self) { _ = try await vault.grant(doctor: "doc", category: "interventions") }
            do { _ = try await vault.grant(doctor: "doc", category: "interventions") } catch let e as ClientError {
                guard case .integrity = e else {
                    Issue.record("expected an integrity error, got \(e)")
                    return
                }
            }
            #expect(try await world.repository.shares(patientID: vault.account.profile.userID).isEmpty, "no grant was submitted")
        }
    }

    @Test(arguments: Backend.allCases)
    func swappedCiphertextFlippedDeleteAndReplayedVersionsAreCaught(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vaultA, vaultB) = try await Self.twoDevices(world, "pat")
            let owner = vaultA.account.profile.userID
            let recordID = RecordID.make(type: .activity, activityID: "walk", occurrence: nil, key: vaultA.account.identity.recordIDKey).hex
            let v1 = try #require(try vaultB.store.records(type: .activity).first?.envelope)
            try await vaultA.updateActivity(try Sample.activity("walk", title: "v2"))
            try await vaultA.addActivity(try Sample.activity("stretch", title: "other"))
            _ = try await vaultA.sync()
            _ = try await vaultB.sync()
            #expect(try await vaultB.activity(id: "walk")?.title == "v2")
            let cursor = try vaultB.store.cursor()
            try await Self.allowTampering(world.repository, backend)

            // Each attack is caught and its record kept aside; the cursor moves past it, and a later sync
            // fetches it again and still refuses it.
            func expectCaught(_ what: String, _ reason: QuarantineReason) async throws {
                await #expect(throws: ClientError.self, "\(what)") { _ = try await vaultB.sync() }
                do { _ = try await vaultB.sync() } catch let e as ClientError {
                    if case .integrity = e {} else { Issue.record("\(what): expected an integrity error, got \(e)") }
                }
                #expect(try vaultB.store.cursor() > cursor, "\(what): the cursor moved past it")
                #expect(try await vaultB.quarantined().map(\.reason) == [reason], "\(what)")
                #expect(try await vaultB.quarantined().map(\.recordID) == [recordID], "\(what)")
                #expect(try await vaultB.activity(id: "walk")?.title == "v2", "\(what): nothing was applied")
                #expect(try await vaultB.activities().count == 2)
            }

            // 1. A replayed older version, delivered as a new change.
            try await Self.redeliver(world.repository, owner: owner, recordID: recordID, versionID: v1.versionID)
            try await expectCaught("replayed version", .replayed)

            // 2. The current version with its delete flag flipped.
            let v2 = try #require(try vaultB.store.records(type: .activity).first { $0.envelope.header.recordID.hex == recordID }?.envelope)
            try await Self.redeliver(world.repository, owner: owner, recordID: recordID, versionID: v2.versionID)
            try await world.repository.attackerEdits(backend, v2, from: #""deleted":false"#, to: #""deleted":true"#)
            try await expectCaught("flipped delete", .invalidSignature)

            // 3. Another record's ciphertext swapped in under this record's header.
            let other = try #require(try vaultB.store.records(type: .activity).first { $0.envelope.header.recordID.hex != recordID }?.envelope)
            // Each edit starts from the version as pushed, so the flipped flag is back as it was.
            try await world.repository.attackerEdits(backend, v2, from: Base64URL.encode(v2.ciphertext), to: Base64URL.encode(other.ciphertext))
            try await expectCaught("swapped ciphertext", .invalidSignature)
        }
    }

    @Test(arguments: Backend.allCases)
    func aRevokedDoctorIsRefusedAndOldKeysOpenNothingNew(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk", title: "before revocation"))
            try await vault.addActivity(try Sample.activity("mood", title: "private", category: "assessments"))
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            // Not approved yet: refused.
            await #expect(throws: ClientError.self) { _ = try await doctor.view(patient: "pat") }
            try await world.approveAll()
            // Approved, but the keys travel only once the patient's device has verified the approval.
            let early = try await doctor.view(patient: "pat")
            #expect(early.activities.isEmpty && early.unreadable == 1)
            #expect(try await doctor.verifiedShares(patient: "pat").1.first?.awaitingKeys == true)
            _ = try await vault.sync()

            let seen = try await doctor.view(patient: "pat")
            #expect(seen.activities.map(\.title) == ["before revocation"], "interventions only; assessments stay closed")
            #expect(try await doctor.patients().patients.map(\.username) == ["pat"])
            await #expect(throws: ClientError.self) { _ = try await doctor.view(patient: "pat", category: "assessments") }
            let (_, shares) = try await doctor.verifiedShares(patient: "pat")
            let oldKeys = try #require(shares.first?.tresor.keys)

            _ = try await vault.revoke(doctor: "doc", category: "interventions")
            try await vault.addActivity(try Sample.activity("run", title: "after revocation"))
            _ = try await vault.sync()

            do {
                _ = try await doctor.view(patient: "pat")
                Issue.record("a revoked doctor could still view")
            } catch let e as ClientError {
                if case .notPermitted = e {} else { Issue.record("expected not permitted, got \(e)") }
            }
            #expect(try await doctor.patients().patients.isEmpty)
            // Even with the ciphertext (say, from a leaked backup) the old keys do not open what came later.
            let owner = vault.account.profile.userID
            let tresorID = Tresor.id(ownerID: owner, category: "interventions")
            let rows = try await world.repository.changes(ownerID: owner, tresorID: tresorID, since: 0, limit: 100)
            let later = try rows.map { try Envelope(binary: $0.envelope) }.filter { $0.header.epoch >= 2 }
            #expect(!later.isEmpty)
            for env in later {
                #expect(throws: EnvelopeError.missingEpochKey(env.header.epoch)) {
                    try env.open(keys: oldKeys, authorKey: vault.account.certificate.signingKey, expecting: EnvelopeContext(ownerID: owner))
                }
            }
        }
    }
}

@Suite("Client: a hostile server cannot redirect keys")
struct KeyRedirectionTests {
    @Test(arguments: Backend.allCases)
    func aSelfGrantRelabelledAsAnotherCategoryIsRefused(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.addActivity(try Sample.activity("mood", category: "assessments"))
            _ = try await vault.sync()
            let before = try await vault.activities().count
            // Swap the category labels of the two tresor rows.
            try await world.repository.databaseOperator.swapTresorCategories("interventions", "assessments")
            do {
                _ = try await vault.sync()
                Issue.record("a relabelled self-grant was accepted")
            } catch let e as ClientError {
                if case .integrity = e {} else { Issue.record("expected an integrity error, got \(e)") }
            }
            #expect(try await vault.activities().count == before, "every record still opens with the keys the device had")
        }
    }

    @Test(arguments: Backend.allCases)
    func rotationGrantsNothingToAShareTheAdminNeverApproved(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let share = try await vault.grant(doctor: "doc", category: "interventions")
            // The server pretends the pending share is active.
            try await world.repository.databaseOperator.editShares(.all, state: .active)
            await #expect(throws: ClientError.self) { try await vault.rotate(category: "interventions", reencrypt: false) }
            #expect(try await world.repository.share(id: share.shareID)?.latestGrant == nil, "no new key was sealed to the doctor")
        }
    }

    @Test func aSecondDeclarationOfOneEpochWithOtherKeysIsAConflict() async throws {
        try await TestDatabase.with(.sqlite) { repo in
            let admin = SigningKeyPair.generate()
            let id = Identity.generate()
            let cert = try Certificate.issue(
                userID: id.userID,
                username: "pat",
                role: .patient,
                signingKey: id.signing.publicKey,
                boxKey: id.box.publicKey,
                issuedAt: 1,
                adminKey: admin
            )
            let reg = try RegistrationRequest.make(
                identity: id,
                username: "pat",
                role: .patient,
                passwordKeys: try await PasswordKeys.derive(password: "pw", salt: .random(), parameters: .interactive),
                kdf: .interactive,
                salt: .random(),
                requestedAt: 1
            )
            try await repo.insertUser(
                UserRow(
                    id: id.userID,
                    username: "pat",
                    role: .patient,
                    status: .active,
                    registration: reg,
                    certificate: cert,
                    approval: nil,
                    rejectReason: nil,
                    createdAt: 1,
                    updatedAt: 1
                ),
                audit: AuditEvent(actor: "t", action: "t")
            )
            func row(_ t: Tresor) throws -> TresorRow {
                TresorRow(
                    id: t.id,
                    ownerID: id.userID,
                    category: t.category,
                    currentEpoch: t.currentEpoch,
                    selfGrant: try Grant.make(patient: id, member: cert, adminKey: admin.publicKey, tresor: t, createdAt: 1),
                    updatedAt: 1
                )
            }
            let first = try row(Tresor.create(ownerID: id.userID, category: "interventions"))
            _ = try await repo.upsertTresor(first, audit: AuditEvent(actor: "t", action: "t"))
            _ = try await repo.upsertTresor(first, audit: AuditEvent(actor: "t", action: "t"))
            await #expect(throws: RepositoryError.self) {
                _ = try await repo.upsertTresor(
                    try row(Tresor.create(ownerID: id.userID, category: "interventions")),
                    audit: AuditEvent(actor: "t", action: "t")
                )
            }
        }
    }
}
