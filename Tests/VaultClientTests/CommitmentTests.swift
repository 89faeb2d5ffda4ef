import Foundation
import GRDB
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// Signed state commitments (Docs/envelope-v1.md §3.4): a server that shows a view which verifies record
/// by record but is wrong as a whole (an older head, a missing head, a lost tombstone, a dropped outcome,
/// an older commitment) is caught by a fresh doctor device and by a fresh patient device.
@Suite("Client: state commitments catch an incomplete or stale view")
struct CommitmentTests {
    /// A patient with walk (updated once), run, swim (removed) and one outcome of walk, shared with "doc",
    /// who viewed it once. Returns the vault, the patient's password and what the attacks need.
    struct Story {
        var vault: PatientVault
        var password: String
        var walkV1: String
        var walk: String
        var run: String
        var swim: String
        var swimLive: String
        var outcome: String
    }

    static func story(_ world: ClientWorld, _ backend: Backend) async throws -> Story {
        let (vault, password) = try await world.patient("pat", on: try world.device("pat-a"))
        let doctor = try await world.doctor("doc", on: try world.device("doc-a"))
        try await vault.addActivity(try Sample.activity("walk", title: "v1"))
        try await vault.addActivity(try Sample.activity("swim"))
        _ = try await vault.sync()
        let id = { (a: String) in RecordID.make(type: .activity, activityID: a, occurrence: nil, key: vault.account.identity.recordIDKey).hex }
        let version = { (rid: String) in try #require(try vault.store.records().first { $0.envelope.header.recordID.hex == rid }).envelope.versionID }
        let walkV1 = try version(id("walk"))
        let swimLive = try version(id("swim"))
        try await vault.updateActivity(try Sample.activity("walk", title: "v2"))
        try await vault.addActivity(try Sample.activity("run"))
        try await vault.removeActivity(id: "swim")
        _ = try await vault.recordOutcome(activityID: "walk", occurrence: 0, value: Sample.value(1))
        _ = try await vault.grant(doctor: "doc", category: "interventions")
        try await world.approveAll()
        _ = try await vault.sync()
        let view = try await doctor.view(patient: "pat")
        #expect(view.incomplete.isEmpty)
        #expect(view.asOf["interventions"] != nil, "the doctor's view says how current it is")
        #expect(view.activities.map(\.title) == ["Walk", "v2"], "run, and walk's newest version")
        let outcome = try #require(try vault.store.records(type: .outcome).first).envelope.header.recordID.hex
        try await MaliciousServerTests.allowTampering(world.repository, backend)
        try await world.repository.databaseOperator.snapshotRecordHeads()
        return Story(
            vault: vault,
            password: password,
            walkV1: walkV1,
            walk: id("walk"),
            run: id("run"),
            swim: id("swim"),
            swimLive: swimLive,
            outcome: outcome
        )
    }

    /// A doctor's device that has never seen this patient: "doc" logging in afresh.
    static func freshDoctor(_ world: ClientWorld, _ name: String) async throws -> DoctorReader {
        let device = try world.device(name)
        let account = try await device.accounts.login(username: "doc", password: "doctor-password")
        return try DoctorReader(account: account, transport: device.transport, adminKey: world.admin.publicKey)
    }

    @Test(arguments: Backend.allCases)
    func everyAttackOnTheSetIsReportedByFreshReaders(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let s = try await Self.story(world, backend)
            let op = world.repository.databaseOperator
            let attacks: [(String, () async throws -> Void)] = [
                ("a head set back to an older version", { try await op.pointRecordHead(s.walk, at: s.walkV1) }),
                ("a head row deleted", { try await op.dropRecordHead(s.run) }),
                ("a tombstone removed", { try await op.pointRecordHead(s.swim, at: s.swimLive, deleted: false) }),
                ("an outcome version removed", { try await op.dropRecordHead(s.outcome) }),
            ]
            for (n, (what, attack)) in attacks.enumerated() {
                try await attack()
                let view = try await Self.freshDoctor(world, "doc-\(n)").view(patient: "pat")
                #expect(view.completenessMessage != nil, "\(what): the doctor is told")
                #expect(view.asOf.isEmpty, "\(what): nothing is shown as current")
                let fresh = try await world.device("pat-\(n)").loginPatient("pat", password: s.password)
                await #expect(throws: ClientError.self, "\(what): a fresh patient device is told") { _ = try await fresh.sync() }
                do { _ = try await fresh.sync() } catch let e as ClientError {
                    guard case let .integrity(m) = e else { throw e }
                    #expect(m.contains("not the set the patient committed to"), "\(what): \(m)")
                }
                #expect(try await fresh.pendingCount() == 0, "\(what): the fresh device pushed nothing")
                try await op.restoreRecordHeads()
            }
            // Restored, a fresh doctor and a fresh patient device accept the view.
            let view = try await Self.freshDoctor(world, "doc-ok").view(patient: "pat")
            #expect(view.completenessMessage == nil)
            _ = try await world.device("pat-ok").loginPatient("pat", password: s.password).sync()
        }
    }

    @Test(arguments: Backend.allCases)
    func aRolledBackCommitmentIsCaughtByReadersThatSawTheNewerOne(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let s = try await Self.story(world, backend)
            let doctor = try await Self.freshDoctor(world, "doc-b")
            #expect(try await doctor.view(patient: "pat").completenessMessage == nil)
            try await world.repository.databaseOperator.snapshotCommitments()
            try await s.vault.addActivity(try Sample.activity("yoga"))
            _ = try await s.vault.sync()
            let newer = try await doctor.view(patient: "pat")
            #expect(newer.completenessMessage == nil)
            #expect(newer.activities.contains { $0.id == "yoga" })
            // The server shows the older commitment again, with the heads it described. The doctor's cache
            // still holds the newer state it accepted: that view stands, as of the newer commitment, and the
            // doctor is told the server is behind (Docs/design.md §5.2).
            try await world.repository.databaseOperator.restoreCommitments()
            let rolledBack = try await doctor.view(patient: "pat")
            #expect(rolledBack.completenessMessage == nil, "\(rolledBack.completenessMessage ?? "")")
            #expect(rolledBack.serverBehind.first?.contains("the server is behind for interventions (it shows commitment") == true)
            #expect(rolledBack.asOf == newer.asOf, "the older commitment is not accepted")
            #expect(rolledBack.activities == newer.activities)
            // A fresh doctor has nothing to hold the server to: it is shown the older state, fork consistency only.
            #expect(try await Self.freshDoctor(world, "doc-fresh").view(patient: "pat").serverBehind.isEmpty)
            // The patient's device saw the newer one: it takes the server as behind and re-sends what it holds
            // (Docs/design.md §5.2), committing after what it accepted; the doctor accepts that, not the older one.
            let accepted = try #require(try s.vault.store.serverStates().commitments.values.first)
            #expect(try await s.vault.sync().healed.count == 1)
            #expect(try s.vault.store.serverStates().commitments.values.first?.sequence == accepted.sequence + 1)
            let healed = try await doctor.view(patient: "pat")
            #expect(healed.completenessMessage == nil, "\(healed.completenessMessage ?? "")")
            #expect(healed.activities.contains { $0.id == "yoga" })
            // A commitment that vanishes is caught the same way.
            try await world.repository.databaseOperator.dropCommitments()
            let vanished = try await doctor.view(patient: "pat")
            #expect(vanished.serverBehind.first?.contains("(it shows no commitment)") == true, "\(vanished.serverBehind)")
            #expect(vanished.asOf == healed.asOf)
        }
    }

    /// "Behind" counts only from a commitment whose signature verifies: an older commitment with a bad
    /// signature is refused as such, and the view it would have let stand is not confirmed.
    @Test func anOlderCommitmentWithABadSignatureLeavesNoViewStanding() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let s = try await Self.story(world, .sqlite)
            let doctor = try await Self.freshDoctor(world, "doc-b")
            let op = world.repository.databaseOperator
            #expect(try await doctor.view(patient: "pat").completenessMessage == nil)
            try await op.snapshotCommitments()
            try await s.vault.addActivity(try Sample.activity("yoga"))
            _ = try await s.vault.sync()
            #expect(try await doctor.view(patient: "pat").completenessMessage == nil)
            try await op.restoreCommitments()
            try await op.alterCommitmentSignatures()
            let forged = try await doctor.view(patient: "pat")
            #expect(forged.serverBehind.isEmpty, "\(forged.serverBehind)")
            #expect(forged.completenessMessage?.contains("does not verify") == true, "\(forged.completenessMessage ?? "")")
            #expect(forged.asOf.isEmpty && !forged.complete)
        }
    }

    /// A tresor this device pushed to without a commitment is exempt from the set comparison only while the
    /// server shows the commitment the device already accepted: a newer one (another device's) must describe
    /// the device's copy, or records withheld by the server would end up in a set the device signs next.
    @Test func anUncommittedTresorIsExemptOnlyFromTheCommitmentAlreadyAccepted() throws {
        let patient = Identity.generate()
        let certificate = try Certificate.issue(
            userID: patient.userID,
            username: "pat",
            role: .patient,
            signingKey: patient.signing.publicKey,
            boxKey: patient.box.publicKey,
            issuedAt: 1,
            adminKey: SigningKeyPair.generate()
        )
        let tresor = UUID()
        let at = HLCTimestamp(physicalMs: 1_700_000_000_000, counter: 0, deviceID: "d")
        var committed = HeadSet()
        try committed.replace(
            recordID: Hex.encode(RandomBytes.bytes(count: 32)),
            old: nil,
            with: .init(versionID: Hex.encode(RandomBytes.bytes(count: 32)), deleted: false, timestamp: at)
        )
        var withMore = committed
        try withMore.replace(
            recordID: Hex.encode(RandomBytes.bytes(count: 32)),
            old: nil,
            with: .init(versionID: Hex.encode(RandomBytes.bytes(count: 32)), deleted: false, timestamp: at)
        )
        let commit = { (n: UInt64, state: HeadSet) in
            StateCommitment.make(
                patient: patient,
                tresorID: tresor,
                category: "interventions",
                sequence: n,
                state: state,
                topEpoch: 1,
                tresorVersion: 1,
                committedAt: 1
            )
        }
        let seen = commit(4, committed)
        var states = ServerStates()
        states.sets[tresor] = HeadSet()  // this device's copy: the server withheld every record
        states.commitments[tresor] = seen
        states.uncommitted = [tresor]
        #expect(states.review([seen], patient: certificate, tresors: [tresor: "interventions"]).isEmpty, "its own pushes explain the difference")
        let problems = states.review([commit(5, withMore)], patient: certificate, tresors: [tresor: "interventions"])
        #expect(problems.count == 1 && problems[0].contains("not the set the patient committed to"), "\(problems)")
        #expect(states.commitments[tresor] == seen, "the newer commitment was not accepted")
    }

    /// The memory of the newest accepted commitment is what catches a rollback: a damaged one is reported,
    /// never taken for "none accepted yet" (which would accept any older commitment after it).
    @Test func aDamagedMemoryOfTheNewestCommitmentIsAnErrorNotAFreshStart() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let s = try await Self.story(world, .sqlite)
            let doctor = try await Self.freshDoctor(world, "doc-m")
            #expect(try await doctor.view(patient: "pat").completenessMessage == nil)
            try await s.vault.store.queue.write { db in try db.execute(sql: "UPDATE server_state SET commitment = x'7b7d'") }
            await #expect(throws: ClientError.self, "the patient's device") { _ = try await s.vault.sync() }
            try await doctor.cache.queue.write { db in try db.execute(sql: "UPDATE share_state SET commitment = x'00'") }
            await #expect(throws: ClientError.self, "the doctor's cache") { _ = try await doctor.view(patient: "pat") }
        }
    }

    /// Readers skip the signature check of the very commitment they accepted before (same statement, same
    /// signature); one whose signature the server changed since is another commitment, and is refused.
    @Test func aCommitmentWhoseSignatureChangedAfterItWasAcceptedIsRefused() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let s = try await Self.story(world, .sqlite)
            let doctor = try await Self.freshDoctor(world, "doc-s")
            #expect(try await doctor.view(patient: "pat").completenessMessage == nil)
            _ = try await s.vault.sync()
            try await world.repository.databaseOperator.alterCommitmentSignatures()
            do {
                _ = try await s.vault.sync()
                Issue.record("the patient's device accepted a commitment whose signature was changed")
            } catch let e as ClientError {
                #expect("\(e)".contains("does not verify"), "\(e)")
            }
            #expect(try await doctor.view(patient: "pat").completenessMessage?.contains("does not verify") == true)
        }
    }

    /// Stores written before the binary form kept the newest accepted commitment as JSON: the store converts
    /// it once when it opens, to the same commitment in binary, so it still catches a rollback.
    @Test func aCommitmentRememberedAsJSONIsConvertedAndStillCatchesARollback() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let s = try await Self.story(world, .sqlite)
            try await world.repository.databaseOperator.snapshotCommitments()
            try await s.vault.addActivity(try Sample.activity("yoga"))
            _ = try await s.vault.sync()
            let accepted = try s.vault.store.serverStates().commitments
            #expect(!accepted.isEmpty)
            try await s.vault.store.queue.write { db in
                for (id, c) in accepted {
                    let json = try LocalStore.encoder.encode(c)
                    #expect(json.first == UInt8(ascii: "{"))
                    try db.execute(sql: "UPDATE server_state SET commitment = ? WHERE tresor_id = ?", arguments: [json, id.uuidString])
                }
                try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v7-binary-commitments'")
            }
            // Opening the store again runs the conversion.
            _ = try LocalStore(url: s.vault.account.store.storeURL)
            let converted = try await s.vault.store.queue.read { db in try Data.fetchAll(db, sql: "SELECT commitment FROM server_state") }
            #expect(!converted.isEmpty && converted.allSatisfy { $0.first != UInt8(ascii: "{") }, "stored in binary")
            #expect(try s.vault.store.serverStates().commitments == accepted)
            try await world.repository.databaseOperator.restoreCommitments()
            // The older commitment is not accepted: the converted one tells the server is behind, and the
            // device re-sends what it holds, committing after what it accepted (Docs/design.md §5.2).
            #expect(try await s.vault.sync().healed.count == 1, "the older commitment is refused")
            try await world.repository.databaseOperator.dropCommitments()
            #expect(try await s.vault.sync().healed.count == 1, "a vanished commitment is refused")
            let now = try s.vault.store.serverStates().commitments
            #expect(Set(now.keys) == Set(accepted.keys))
            for (id, c) in accepted { #expect(now[id].map { $0.sequence == c.sequence + 2 } == true, "nothing older was accepted") }
        }
    }

    @Test(arguments: Backend.allCases)
    func concurrentPushesFromTwoDevicesEndWithACommitmentEveryReaderAccepts(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (a, password) = try await world.patient("pat", on: try world.device("pat-a"))
            try await a.addActivity(try Sample.activity("walk"))
            _ = try await a.sync()
            let b = try await world.device("pat-b").loginPatient("pat", password: password)
            _ = try await b.sync()
            for i in 0..<3 {
                try await a.addActivity(try Sample.activity("a\(i)"))
                try await b.addActivity(try Sample.activity("b\(i)"))
            }
            async let first = a.sync()
            async let second = b.sync()
            _ = try await (first, second)
            _ = try await a.sync()
            _ = try await b.sync()
            #expect(try await a.activities().count == 7)
            #expect(try await b.activities().count == 7)
            let fresh = try await world.device("pat-c").loginPatient("pat", password: password)
            _ = try await fresh.sync()
            _ = try await world.doctor("doc", on: try world.device("doc"))
            _ = try await a.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await a.sync()
            let view = try await Self.freshDoctor(world, "doc-2").view(patient: "pat")
            #expect(view.completenessMessage == nil)
            #expect(view.asOf["interventions"] != nil)
            #expect(view.activities.count == 7)
        }
    }

    /// Batches overlap: the second goes out with commitments signed over the state the first was planned to
    /// leave, before the first is acknowledged. A version the server refuses in the first batch makes both
    /// commitments stale; the push must go on and end by committing to what the server holds, so every reader
    /// accepts the state afterwards.
    @Test(arguments: Backend.allCases)
    func aRefusalInTheFirstOfOverlappingBatchesEndsWithACommitmentEveryReaderAccepts(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, password) = try await world.patient("pat", on: try world.device("pat-a"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let value = OutcomeValue(value: .boolean(true), createdAt: Date(timeIntervalSince1970: 1_780_000_000))
            // 800 outcomes, two batches; the 300th carries a note past the server's ciphertext limit.
            for i in 0..<800 {
                let note = i == 300 ? String(repeating: "n", count: APILimits.maxCiphertextBytes + 1) : nil
                _ = try await vault.recordOutcome(activityID: "walk", occurrence: i, value: value, note: note)
            }
            let summary = try await vault.sync()
            #expect(summary.pushed == 799 && summary.rejected.count == 1, "\(summary.pushed) stored, \(summary.rejected)")
            #expect(summary.rejected.first?.contains("payload_too_large") == true, "\(summary.rejected)")
            #expect(try vault.store.uncommittedTresors().isEmpty, "the tresor was committed again at the end")
            // A fresh device checks the server's newest commitment against every head it pulls.
            let fresh = try await world.device("pat-b").loginPatient("pat", password: password)
            let pulled = try await fresh.sync()
            #expect(pulled.pulled == 800)
            _ = try await world.doctor("doc", on: try world.device("doc"))
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            let view = try await Self.freshDoctor(world, "doc-2").view(patient: "pat")
            #expect(view.completenessMessage == nil)
            #expect(view.outcomes.count == 799)
        }
    }

    @Test(arguments: Backend.allCases)
    func aPushWithAStaleCommitmentIsRefusedAsAWhole(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("pat-a"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let owner = vault.account.profile.userID
            let before = try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100).count
            try await vault.addActivity(try Sample.activity("run"))
            let batch = try vault.store.outbox(limit: 10)
            var plan = try await vault.commitmentPlan(batch)
            let transport = await vault.transport
            #expect(plan.count == 1)
            let stored = try #require(try vault.store.serverStates().commitments.values.first)
            // The sequence it already holds: the server must refuse it, and the envelope with it. (One above
            // it is any later one: a device re-sending a state the server lost, Docs/design.md §5.2.)
            plan[0].commitment = StateCommitment.make(
                patient: vault.account.identity,
                tresorID: stored.tresorID,
                category: "interventions",
                sequence: stored.sequence,
                state: plan[0].state,
                topEpoch: 1,
                tresorVersion: stored.tresorVersion,
                committedAt: 1
            )
            let body = try PatientVault.pushBody(batch, commitments: [plan[0].commitment])
            do {
                _ = try await transport.push(batch: body, auth: try vault.account.sessionAuth)
                Issue.record("a stale commitment was accepted")
            } catch let e as ClientError {
                guard case let .conflict(m) = e else { throw e }
                #expect(m.contains("stale") && m.contains("commit sequence \(stored.sequence + 1)"), "\(m)")
            }
            #expect(try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100).count == before, "nothing was stored")
            // A commitment signed by someone else is refused too.
            let rogue = StateCommitment.make(
                patient: Identity.generate(userID: owner),
                tresorID: stored.tresorID,
                category: "interventions",
                sequence: stored.sequence + 1,
                state: plan[0].state,
                topEpoch: 1,
                tresorVersion: 0,
                committedAt: 1
            )
            await #expect(throws: ClientError.self) {
                _ = try await transport.push(batch: try PatientVault.pushBody(batch, commitments: [rogue]), auth: try vault.account.sessionAuth)
            }
            // The honest sync still goes through.
            #expect(try await vault.sync().pushed == 1)
        }
    }
}
