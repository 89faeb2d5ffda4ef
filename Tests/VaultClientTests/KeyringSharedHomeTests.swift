import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient

/// Two processes on one home (a `carevault-patient sync --watch` running beside a `log` or a `revoke`):
/// the keyring is one row replaced whole, so every change starts from the row as committed, never from what
/// a process read when it opened (Docs/design.md §5).
@Suite("Client: two processes on one home share one keyring")
struct KeyringSharedHomeTests {
    @Test func aKeyMadeByAnotherProcessSurvivesThisOnesNextKeyChange() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (first, _) = try await world.patient("kira", on: device)
            try await first.addActivity(try Sample.activity("walk"))
            _ = try await first.sync()
            // A second process opens the same home, then makes a category the first has never seen.
            let second = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey)
            try await second.addActivity(try Sample.activity("scale", category: "assessments"))
            // The first, still open, makes another: its write must keep the second's key.
            try await first.addActivity(try Sample.activity("pills", category: "medications"))

            let reopened = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey)
            let ring = await reopened.keyring
            #expect(Set(ring.tresors.keys) == ["interventions", "assessments", "medications"], "no process dropped another's key")
            #expect(try await reopened.activities().map(\.id).sorted() == ["pills", "scale", "walk"], "every record still opens")
            // The long-lived process syncs what the other wrote, under the other's key.
            let summary = try await first.sync()
            #expect(summary.pushed == 2)
        }
    }

    @Test func aRecordIsSealedUnderTheEpochAnotherProcessRotatedTo() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (first, _) = try await world.patient("kira", on: device)
            try await first.addActivity(try Sample.activity("walk"))
            _ = try await first.sync()
            #expect(await first.keyring["interventions"]?.currentEpoch == 1)
            // Another process rotates (as a revocation does); the first still holds epoch 1 in memory.
            let second = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey)
            try await second.rotate(category: "interventions", reencrypt: false)
            #expect(await second.keyring["interventions"]?.currentEpoch == 2)

            try await first.addActivity(try Sample.activity("run"))
            let pending = try first.store.read { tx in try tx.records(category: "interventions") }.filter(\.pending)
            #expect(pending.count == 1)
            #expect(pending.allSatisfy { $0.envelope.header.epoch == 2 }, "never sealed under the epoch a rotation ended")

            // And a rotation by the first starts from the row's newest epoch, not from its own copy.
            try await first.rotate(category: "interventions", reencrypt: false)
            let reopened = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey)
            #expect(await reopened.keyring["interventions"]?.currentEpoch == 3)
            #expect(await reopened.keyring["interventions"]?.keys.count == 3, "no epoch key lost")
            #expect(try await reopened.activities().map(\.id).sorted() == ["run", "walk"])
        }
    }

    /// What another process of the same device does while this one's key list is on its way.
    enum Meanwhile: String, CaseIterable, Sendable {
        /// `share grant`: declares the next tresor version (the seen mark rises).
        case grant
        /// `share revoke`'s rotation: the next version and a new epoch (both marks rise).
        case rotate
    }

    /// A patient with one synced activity, and a doctor "doc" to grant to; the patient's vault and device.
    static func patientWithDoctor(_ world: ClientWorld) async throws -> (PatientVault, Device) {
        let device = try world.device("a")
        let (first, _) = try await world.patient("kira", on: device)
        _ = try await world.doctor("doc", on: try world.device("d"))
        try await first.addActivity(try Sample.activity("walk"))
        _ = try await first.sync()
        return (first, device)
    }

    /// Another process of this device raises a mark while this one's `GET /v1/tresors` answer is on its way,
    /// so the list it then holds is older than the mark. That is a race of this device, fetched again, not a
    /// rolled-back server (`sync --watch` beside `share grant` exited 65 on it in a CI run).
    @Test(arguments: Meanwhile.allCases)
    func aMarkRaisedByAnotherProcessDuringTheFetchIsFetchedAgainNotRefused(meanwhile: Meanwhile) async throws {
        try await HostileShareServer.run(.sqlite) { world, mode in
            let (first, device) = try await Self.patientWithDoctor(world)
            let before = try #require(try first.store.ledgerState(category: "interventions"))

            let second = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey)
            mode.withLockedValue {
                $0.whileTresorListTravels = {
                    switch meanwhile {
                    case .grant: _ = try await second.grant(doctor: "doc", category: "interventions")
                    case .rotate: try await second.rotate(category: "interventions", reencrypt: false)
                    }
                }
                $0.log = []
            }
            try await first.reconcileTresors()

            let after = try #require(try first.store.ledgerState(category: "interventions"))
            #expect(after.seenVersion > before.seenVersion, "the other process's version was taken in")
            if meanwhile == .rotate { #expect(after.topEpoch > before.topEpoch) }
            let lists = mode.withLockedValue { $0.log }.filter { $0 == "GET \(Routes.tresors)" }.count
            #expect(lists >= 3, "the stale list, the other process's own, and this one's second fetch")
            // And it writes on: the next record is accepted (stored, or found stored when a push under load was
            // sent again) and nothing is left unsent.
            try await first.addActivity(try Sample.activity("run"))
            let summary = try await first.sync()
            #expect(summary.rejected.isEmpty, "\(summary)")
            let unsent = try first.store.read { tx in try tx.records(category: "interventions") }.filter(\.pending)
            #expect(unsent.isEmpty, "\(summary)")
        }
    }

    /// A server that keeps serving the list from before another process's change is behind this device, at
    /// once (the list is older than the marks read before the fetch): the device takes nothing of it and
    /// declares its own state again (Docs/design.md §5.2), without the fetches again a raised mark would earn.
    @Test func aListOlderThanTheMarksReadBeforeTheFetchIsDeclaredOver() async throws {
        try await HostileShareServer.run(.sqlite) { world, mode in
            let (first, device) = try await Self.patientWithDoctor(world)
            // The server captures the list as it is now, and serves that from here on.
            mode.withLockedValue { $0.replayTresorList = true }
            try await first.reconcileTresors()
            let second = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey)
            _ = try await second.grant(doctor: "doc", category: "interventions")
            mode.withLockedValue { $0.log = [] }
            let before = try #require(try first.store.ledgerState(category: "interventions"))
            let notes = try await first.reconcileTresors()
            #expect(notes.contains { $0.contains("the key declaration of interventions") }, "\(notes)")
            let after = try #require(try first.store.ledgerState(category: "interventions"))
            #expect(after.seenVersion > before.seenVersion && after.ledger.members == before.ledger.members, "nothing of the replayed list taken")
            let log = mode.withLockedValue { $0.log }
            #expect(log.filter { $0 == "GET \(Routes.tresors)" }.count < 4, "without the fetches again a raised mark would earn: \(log)")
            #expect(log.contains("PUT \(Routes.tresors)"), "\(log)")
        }
    }
}
