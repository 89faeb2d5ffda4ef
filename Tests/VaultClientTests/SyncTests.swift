import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

@testable import VaultClient

@Suite("Client: accounts and sync against a live server")
struct SyncTests {
    @Test(arguments: Backend.allCases)
    func secondDeviceGetsTheSameKeysAndData(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let b = try world.device("b")
            let (vaultA, password) = try await world.patient("alice", on: a)
            try await vaultA.addActivity(try Sample.activity("walk"))
            try await vaultA.recordOutcome(activityID: "walk", occurrence: 0, value: Sample.value(4200))
            let first = try await vaultA.sync()
            #expect(first.pushed == 2 && first.rejected.isEmpty)
            // Its own pushes come back from the server, and are not reported as received.
            #expect(first.pulled == 0)
            #expect(try await vaultA.sync().pulled == 0)

            let vaultB = try await b.loginPatient("alice", password: password)
            #expect(vaultB.account.identity.signing.publicKey == vaultA.account.identity.signing.publicKey)
            #expect(vaultB.account.identity.recordIDKey == vaultA.account.identity.recordIDKey)
            #expect(vaultB.account.profile.deviceID != vaultA.account.profile.deviceID)
            let pulled = try await vaultB.sync()
            #expect(pulled.pulled == 2)
            #expect(try await vaultB.activities() == (try await vaultA.activities()))
            // What another device wrote is received, once.
            try await vaultB.addActivity(try Sample.activity("run"))
            #expect(try await vaultB.sync().pulled == 0)
            #expect(try await vaultA.sync().pulled == 1)
            #expect(try await vaultB.outcomes().first?.values.map(\.value) == [.number(4200)])
            // Wrong password on a new device: a clear "not permitted", nothing stored.
            let c = try world.device("c")
            await #expect(throws: ClientError.self) { _ = try await c.loginPatient("alice", password: "wrong password") }
            await #expect(throws: ClientError.self) { _ = try await c.accounts.unlock(password: nil) }
        }
    }

    @Test(arguments: Backend.allCases)
    func twoDevicesEditingOneActivityOfflineConverge(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let b = try world.device("b")
            let (vaultA, password) = try await world.patient("bob", on: a)
            try await vaultA.addActivity(try Sample.activity("walk"))
            _ = try await vaultA.sync()
            let vaultB = try await b.loginPatient("bob", password: password)
            _ = try await vaultB.sync()
            // Offline on both devices.
            try await vaultA.updateActivity(try Sample.activity("walk", title: "Walk 20 minutes"))
            try await vaultB.updateActivity(try Sample.activity("walk", title: "Walk 45 minutes"))
            _ = try await vaultA.sync()
            _ = try await vaultB.sync()
            _ = try await vaultA.sync()
            let titleA = try await vaultA.activity(id: "walk")?.title
            let titleB = try await vaultB.activity(id: "walk")?.title
            #expect(titleA == titleB, "both devices converge on one winner")
            #expect(titleA == "Walk 45 minutes", "the later write (B's, by HLC) wins")
            let pendingA = try await vaultA.pendingCount()
            let pendingB = try await vaultB.pendingCount()
            #expect(pendingA == 0 && pendingB == 0)
        }
    }

    @Test(arguments: Backend.allCases)
    func offlineValuesForOneOccurrenceMergeIntoOneOutcome(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let b = try world.device("b")
            let (vaultA, password) = try await world.patient("carol", on: a)
            try await vaultA.addActivity(try Sample.activity("walk"))
            _ = try await vaultA.sync()
            let vaultB = try await b.loginPatient("carol", password: password)
            _ = try await vaultB.sync()
            try await vaultA.recordOutcome(activityID: "walk", occurrence: 2, value: Sample.value(1000, at: 1_767_300_000_000))
            try await vaultB.recordOutcome(activityID: "walk", occurrence: 2, value: Sample.value(2500, at: 1_767_300_000_500))
            _ = try await vaultA.sync()
            let merge = try await vaultB.sync()
            #expect(merge.conflictsResolved == 1)
            _ = try await vaultA.sync()
            for vault in [vaultA, vaultB] {
                let outcomes = try await vault.outcomes(activityID: "walk")
                #expect(outcomes.count == 1)
                #expect(Set(outcomes.first?.liveValues.map(\.value) ?? []) == [.number(1000), .number(2500)], "no device's reading is lost")
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func sameActivityCreatedOfflineOnTwoDevicesIsOneRecord(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let b = try world.device("b")
            let (vaultA, password) = try await world.patient("dave", on: a)
            let vaultB = try await b.loginPatient("dave", password: password)
            // Both devices make the tresor and the activity offline: two different epoch-1 keys.
            try await vaultA.addActivity(try Sample.activity("walk", title: "from A"))
            try await vaultB.addActivity(try Sample.activity("walk", title: "from B"))
            _ = try await vaultA.sync()
            _ = try await vaultB.sync()
            _ = try await vaultA.sync()
            #expect(try await vaultA.activities().count == 1)
            #expect(try await vaultB.activities().count == 1)
            #expect(try await vaultA.activities() == (try await vaultB.activities()))
            let owner = vaultA.account.profile.userID
            let heads = try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100)
            #expect(heads.count == 1, "one record on the server, not two")
        }
    }

    @Test(arguments: Backend.allCases)
    func aClockHoursAheadDoesNotFreezeARecordAndAFarFutureOneIsRefused(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let b = try world.device("b")
            let (_, password) = try await world.patient("erin", on: a)
            let ahead = try await a.accounts.login(username: "erin", password: password)
            let skewed = try PatientVault(
                account: ahead,
                transport: a.transport,
                adminKey: world.admin.publicKey,
                now: { Date().addingTimeInterval(2 * 3600) }
            )
            try await skewed.addActivity(try Sample.activity("walk", title: "written by a fast clock"))
            _ = try await skewed.sync()
            let vaultB = try await b.loginPatient("erin", password: password)
            _ = try await vaultB.sync()
            try await vaultB.updateActivity(try Sample.activity("walk", title: "edited later by a correct clock"))
            _ = try await vaultB.sync()
            _ = try await skewed.sync()
            #expect(try await skewed.activity(id: "walk")?.title == "edited later by a correct clock", "the HLC carried B past A's clock")

            let far = try PatientVault(
                account: ahead,
                transport: a.transport,
                adminKey: world.admin.publicKey,
                now: { Date().addingTimeInterval(400 * 86_400) }
            )
            try await far.addActivity(try Sample.activity("future"))
            let summary = try await far.sync()
            #expect(summary.rejected.count == 1)
            #expect(summary.rejected.first?.contains("clock_skew") == true)
            #expect(summary.rejected.first?.contains("ahead of the server") == true)
        }
    }

    @Test(arguments: Backend.allCases)
    func syncInterruptedAfterTheServerCommittedLosesAndDuplicatesNothing(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let (vault, _) = try await world.patient("frank", on: a)
            try await vault.addActivities(try (0..<30).map { try Sample.activity("act-\($0)") })
            try await vault.reconcileTresors()
            // The push reaches the server and is committed, but the answer never arrives.
            let outbox = try vault.store.outbox(limit: 100)
            let token = try #require(vault.account.session?.token)
            _ = try await a.transport.push(batch: try EnvelopeFrame.encode(outbox.map(\.envelope)), auth: .session(token))
            #expect(try await vault.pendingCount() == 30, "the device still thinks nothing was sent")
            let resumed = try await vault.sync()
            #expect(resumed.duplicates == 30 && resumed.pushed == 0, "the server recognises every version")
            #expect(try await vault.pendingCount() == 0)
            #expect(try await vault.activities().count == 30)
            let heads = try await world.repository.changes(ownerID: vault.account.profile.userID, tresorID: nil, since: 0, limit: 100)
            #expect(heads.count == 30, "nothing duplicated on the server")
        }
    }

    @Test(arguments: Backend.allCases)
    func aPullOf10001ChangesPagesCompletely(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let b = try world.device("b")
            let (vault, password) = try await world.patient("grace", on: a)
            try await vault.addActivities(try (0..<10_001).map { try Sample.activity(String(format: "a%05d", $0)) })
            let pushed = try await vault.sync()
            #expect(pushed.pushed == 10_001)
            let other = try await b.loginPatient("grace", password: password)
            let pulled = try await other.sync()
            #expect(pulled.pulled == 10_001)
            let ids = try await other.activities().map(\.id)
            #expect(ids.count == 10_001 && Set(ids).count == 10_001)
            #expect(try other.store.cursor() == 10_001)
        }
    }

    /// A doctor's view decrypts the cache a page at a time: every record is listed once across pages,
    /// a removed one in none, whatever the page size.
    @Test func aViewReadsTheCacheAPageAtATimeAndListsEveryRecordOnce() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("pat-a"))
            let doctor = try await world.doctor("doc", on: try world.device("doc-a"))
            try await vault.addActivities(try (0..<8).map { try Sample.activity("a\($0)") })
            try await vault.removeActivity(id: "a3")
            _ = try await vault.recordOutcome(activityID: "a5", occurrence: 0, value: Sample.value(1))
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            let expected = ["a0", "a1", "a2", "a4", "a5", "a6", "a7"]
            // The first view is handed the records its refresh opened; the later ones open the cached heads.
            var first: PatientView?
            for page in [1, 3, 8, 4_096] {
                await doctor.setViewPage(page)
                let view = try await doctor.view(patient: "pat")
                #expect(view.activities.map(\.id) == expected, "page of \(page)")
                #expect(view.outcomes.map(\.activityID) == ["a5"], "page of \(page)")
                #expect(view.completenessMessage == nil && view.unreadable == 0)
                if let first { #expect(view.activities == first.activities && view.outcomes == first.outcomes, "page of \(page)") }
                first = first ?? view
            }
            // A record changed since: handed over at its new version, the rest read from the cache.
            var changed = try Sample.activity("a1")
            changed.title = "changed"
            try await vault.updateActivity(changed)
            _ = try await vault.sync()
            let updated = try await doctor.view(patient: "pat")
            #expect(updated.activities.first { $0.id == "a1" }?.title == "changed")
            let again = try await doctor.view(patient: "pat")
            #expect(again.activities == updated.activities && again.outcomes == updated.outcomes)
        }
    }
}

@Suite("Client: key rotation")
struct RotationTests {
    @Test(arguments: Backend.allCases)
    func revokeWithReencryptMovesEveryRecordToTheNewEpochAndOtherDevicesFollow(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let a = try world.device("a")
            let b = try world.device("b")
            let (vault, password) = try await world.patient("ivy", on: a)
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            _ = try await world.doctor("doc2", on: try world.device("d2"))
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.recordOutcome(activityID: "walk", occurrence: 0, value: Sample.value(1))
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            _ = try await vault.grant(doctor: "doc2", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()

            _ = try await vault.revoke(doctor: "doc2", category: "interventions", reencrypt: true)
            let epochs = try vault.store.records().map(\.envelope.header.epoch)
            #expect(Set(epochs) == [2], "every record was re-sealed under the new epoch")
            // The remaining doctor got the new epoch through a patient-signed grant and still reads everything.
            let seen = try await doctor.view(patient: "ivy")
            #expect(seen.activities.map(\.id) == ["walk"] && seen.unreadable == 0)
            // Another device of the patient learns the new key from the server's self-grant.
            let other = try await b.loginPatient("ivy", password: password)
            _ = try await other.sync()
            #expect(try await other.activities().map(\.id) == ["walk"])
            #expect(try await other.outcomes().first?.values.count == 1)
        }
    }
}
