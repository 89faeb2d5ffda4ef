import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// A restored backup older than the patient's last sync (Docs/design.md §5.2): the patient's devices that
/// are ahead re-send the versions they hold and the server catches up; readers never take the older state
/// as current meanwhile; a server that only claims to be behind gets nothing it did not have.
@Suite("Client: a restored older backup heals from the patient's devices")
struct RestoreHealTests {
    /// The titles of the live activities of a vault, sorted.
    static func titles(_ vault: PatientVault) async throws -> [String] {
        try await vault.activities().map { "\($0.id):\($0.title)" }.sorted()
    }

    /// The outcome value ids of a vault, sorted.
    static func readings(_ vault: PatientVault) async throws -> [String] {
        try await vault.outcomes().flatMap { $0.values.map(\.id) }.sorted()
    }

    @Test(arguments: Backend.allCases)
    func anOlderBackupRestoredHealsEveryDeviceAndDoctor(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let op = world.repository.databaseOperator
            let (a, password) = try await world.patient("pat", on: try world.device("pat-a"))
            let doctor = try await world.doctor("doc", on: try world.device("doc-a"))
            try await a.addActivity(try Sample.activity("walk", title: "v1"))
            try await a.addActivity(try Sample.activity("swim"))
            _ = try await a.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await a.sync()
            let b = try await world.device("pat-b").loginPatient("pat", password: password)
            _ = try await b.sync()
            #expect(try await doctor.view(patient: "pat").completenessMessage == nil)

            // The backup; then a day of work the restore will lose on the server.
            try await op.backUpRecords()
            try await a.updateActivity(try Sample.activity("walk", title: "v2"))
            try await a.addActivity(try Sample.activity("run"))
            try await a.removeActivity(id: "swim")
            _ = try await a.recordOutcome(activityID: "walk", occurrence: 0, value: Sample.value(1))
            _ = try await a.sync()
            _ = try await b.sync()
            try await b.addActivity(try Sample.activity("yoga"))
            _ = try await b.sync()  // b is now the newest: it saw a's work and added yoga
            let before = try await doctor.view(patient: "pat")
            #expect(before.completenessMessage == nil)
            #expect(before.activities.map(\.id).sorted() == ["run", "walk", "yoga"])

            try await op.restoreRecordsBackup()
            // A change made on a while the server was down, sent with the heal.
            _ = try await a.recordOutcome(activityID: "walk", occurrence: 1, value: Sample.value(2))

            // The doctor keeps showing what it accepted, as of that commitment, and says the server is behind;
            // the older state is not taken as current.
            let waiting = try await doctor.view(patient: "pat")
            #expect(waiting.completenessMessage == nil, "\(waiting.completenessMessage ?? "")")
            #expect(waiting.serverBehind.count == 1)
            let note = try #require(waiting.serverBehind.first)
            #expect(note.contains("the server is behind for interventions (it shows commitment"), "\(note)")
            #expect(note.contains("waiting for the patient's device"), "\(note)")
            #expect(waiting.asOf == before.asOf, "as of the commitment accepted before the restore")
            #expect(waiting.activities == before.activities && waiting.outcomes == before.outcomes)
            #expect(waiting.quarantined.isEmpty, "the older heads are not pulled again while the server is behind")

            // a heals: it says so, re-sends what it holds, and commits after what it accepted.
            let healedA = try await a.sync()
            #expect(healedA.healed.count == 1)
            #expect(healedA.healed.first?.contains("the server is behind what this device last saw (interventions") == true)
            #expect(healedA.healed.first?.contains("re-sending") == true)
            // The doctor accepted b's state at the sequence a's heal now takes: two statements at one sequence
            // are reported as such, and no view stands on either.
            let between = try await doctor.view(patient: "pat")
            #expect(between.serverBehind.isEmpty, "\(between.serverBehind)")
            let two = try #require(between.completenessMessage)
            #expect(two.contains("another state of interventions at commitment"), "\(two)")
            // b went further than a: a's heal is another state at the sequence b accepted; b heals in turn.
            // Two statements signed at one sequence are said outright, not as an ordinary restore.
            let healedB = try await b.sync()
            #expect(healedB.healed.count == 1, "\(healedB.healed)")
            let twoStates = try #require(healedB.healed.first)
            #expect(twoStates.contains("the server shows another state of interventions signed at commitment"), "\(twoStates)")
            #expect(twoStates.contains("two different histories") && twoStates.contains("re-sending"), "\(twoStates)")
            let settledA = try await a.sync()
            #expect(settledA.healed.isEmpty, "a second sync needs no heal")
            #expect(try await b.sync().healed.isEmpty)

            // Everyone agrees, and nothing any device held is lost.
            let expected = ["run:Walk", "walk:v2", "yoga:Walk"]
            #expect(try await Self.titles(a) == expected)
            #expect(try await Self.titles(b) == expected)
            #expect(try await Self.readings(a).count == 2)
            let readingsA = try await Self.readings(a)
            #expect(try await Self.readings(b) == readingsA)
            #expect(try await a.pendingCount() == 0)
            #expect(try await b.pendingCount() == 0)
            let after = try await doctor.view(patient: "pat")
            #expect(after.completenessMessage == nil, "\(after.completenessMessage ?? "")")
            #expect(after.serverBehind.isEmpty)
            #expect(try #require(after.asOf["interventions"]) > (before.asOf["interventions"] ?? .max), "the healed state is newer")
            #expect(after.activities.map(\.id).sorted() == ["run", "walk", "yoga"])
            #expect(after.outcomes.flatMap(\.values).count == 2)
            let fresh = try await world.device("pat-c").loginPatient("pat", password: password)
            _ = try await fresh.sync()
            #expect(try await Self.titles(fresh) == expected)
            #expect(try await Self.readings(fresh) == readingsA)
            let freshDoctor = try await world.device("doc-b").accounts.login(username: "doc", password: "doctor-password")
            let second = try DoctorReader(account: freshDoctor, transport: try world.device("doc-b").transport, adminKey: world.admin.publicKey)
            #expect(try await second.view(patient: "pat").completenessMessage == nil)
        }
    }

    /// A tresor of more records than one push batch heals too: its versions go out batch after batch
    /// without commitments (the server, behind, holds the device's whole copy only once the last is in),
    /// and the device commits to it once at the end.
    @Test(arguments: Backend.allCases)
    func aTresorLargerThanOneBatchHeals(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let op = world.repository.databaseOperator
            let (a, password) = try await world.patient("pat", on: try world.device("pat-a"))
            let doctor = try await world.doctor("doc", on: try world.device("doc-a"))
            try await a.addActivity(try Sample.activity("walk"))
            _ = try await a.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await a.sync()
            try await op.backUpRecords()
            let count = SyncPolicy.pushBatch + 150
            for i in 0..<count { _ = try await a.recordOutcome(activityID: "walk", occurrence: i, value: Sample.value(Double(i))) }
            _ = try await a.sync()
            #expect(try await doctor.view(patient: "pat").completenessMessage == nil)

            try await op.restoreRecordsBackup()
            let healed = try await a.sync()
            #expect(healed.healed.count == 1 && healed.healed.first?.contains("re-sending") == true, "\(healed.healed)")
            #expect(try await a.sync().healed.isEmpty, "one heal is enough")
            #expect(try await a.pendingCount() == 0)
            let view = try await doctor.view(patient: "pat")
            #expect(view.completenessMessage == nil, "\(view.completenessMessage ?? "")")
            #expect(view.outcomes.count == count)
            let fresh = try await world.device("pat-b").loginPatient("pat", password: password)
            _ = try await fresh.sync()
            #expect(try await fresh.outcomes().count == count)
        }
    }

    /// A server that only claims to be behind (its commitment rolled back, every version still held) makes
    /// the device re-send versions the server already stores, nothing else, and commit after what it
    /// accepted: the server learns nothing and no reader takes the older commitment as current.
    @Test(arguments: Backend.allCases)
    func aServerClaimingToBeBehindGetsOnlyWhatItAlreadyHeld(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let op = world.repository.databaseOperator
            let (a, _) = try await world.patient("pat", on: try world.device("pat-a"))
            try await a.addActivity(try Sample.activity("walk"))
            _ = try await a.sync()
            try await op.snapshotCommitments()
            try await a.addActivity(try Sample.activity("run"))
            _ = try await a.sync()
            let owner = a.account.profile.userID
            let versions = try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100).count
            let accepted = try #require(try a.store.serverStates().commitments.values.first)
            try await op.restoreCommitments()
            let summary = try await a.sync()
            #expect(summary.healed.count == 1)
            #expect(summary.pushed == 0, "every version re-sent was one the server already stored")
            #expect(summary.duplicates == 2)
            #expect(try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100).count == versions)
            let now = try #require(try a.store.serverStates().commitments.values.first)
            #expect(now.sequence == accepted.sequence + 1, "committed after what it accepted, never below")
            #expect(now.describes(try #require(try a.store.serverStates().sets[now.tresorID])))
        }
    }

    /// A server that takes the re-sent versions and keeps showing the old state: the heal runs once per
    /// sync and the sync ends as an integrity failure; the device never accepts the older state.
    @Test(arguments: Backend.allCases)
    func aServerThatStaysBehindAfterTheHealIsAnIntegrityFailure(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let op = world.repository.databaseOperator
            let (a, _) = try await world.patient("pat", on: try world.device("pat-a"))
            try await a.addActivity(try Sample.activity("walk"))
            _ = try await a.sync()
            try await op.backUpRecords()
            try await a.addActivity(try Sample.activity("run"))
            _ = try await a.sync()
            let accepted = try #require(try a.store.serverStates().commitments.values.first)
            try await op.restoreRecordsBackup()
            try await op.ignoreCommitmentUpdates()
            for _ in 0..<2 {
                do {
                    _ = try await a.sync()
                    Issue.record("a server that stays behind was accepted")
                } catch let e as ClientError {
                    guard case let .integrity(m) = e else { throw e }
                    #expect(m.contains("older state of interventions"), "\(m)")
                }
                let kept = try #require(try a.store.serverStates().commitments.values.first)
                #expect(kept.sequence > accepted.sequence, "the device's accepted state never goes back")
                #expect(try await Self.titles(a) == ["run:Walk", "walk:Walk"], "the device keeps its records")
            }
        }
    }
}
