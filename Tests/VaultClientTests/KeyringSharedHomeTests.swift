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

    /// A `share grant` in another process declares a new tresor version while this process's key list is
    /// on its way: the list this process then holds is older than the mark the grant raised. That is a race
    /// of this device, fetched again, not a rolled-back server (a CI run of `sync --watch` beside `share grant`
    /// exited 65 on it); the same old list against marks read before the fetch is still refused.
    @Test func aMarkRaisedByAnotherProcessDuringTheFetchIsFetchedAgainNotRefused() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (first, _) = try await world.patient("kira", on: device)
            _ = try await world.doctor("doc", on: try world.device("d"))
            try await first.addActivity(try Sample.activity("walk"))
            _ = try await first.sync()

            // The first process reads its marks and fetches the list...
            let marksBefore = try first.store.ledgerMarks()
            let list = try await device.transport.send(TresorEndpoints.list, auth: try await first.auth)
            var stale: [(tresor: Tresor, ledger: TresorLedger)] = []
            for info in list.tresors { stale.append(try await first.openSelfGrant(info)) }
            let versionBefore = try #require(stale.first?.ledger.version)
            // ...while a second process of the same device grants a share, which declares the next version.
            let second = try PatientVault(account: first.account, transport: device.transport, adminKey: world.admin.publicKey)
            _ = try await second.grant(doctor: "doc", category: "interventions")
            let raised = try #require(try first.store.ledgerState(category: "interventions"))
            #expect(raised.seenVersion > versionBefore, "the grant raised the mark")

            await #expect(throws: PatientVault.MarksRaisedMeanwhile.self) {
                _ = try await first.adopt(stale, legacy: [:], marksBefore: marksBefore)
            }
            // Against marks read after the grant, the same list is a rollback, and refused.
            await #expect(throws: ClientError.self) {
                _ = try await first.adopt(stale, legacy: [:], marksBefore: try first.store.ledgerMarks())
            }
            // The whole step fetches again and takes in the grant's version.
            try await first.reconcileTresors()
            #expect(try first.store.ledgerState(category: "interventions")?.seenVersion == raised.seenVersion)
            try await first.addActivity(try Sample.activity("run"))
            #expect(try await first.sync().pushed == 1)
        }
    }
}
