import Foundation
import GRDB
import Testing
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient

/// The keyring moves from its own file into the device's database (Docs/design.md §5): a home written by
/// the previous version opens with every key, and no crash point of the move loses one.
@Suite("Client: the keyring moves into the device database")
struct KeyringMoveTests {
    /// The keys of every category of `ring`, by category and epoch.
    static func keys(_ ring: Keyring) -> [String: [UInt32: SymmetricKey]] { ring.tresors.mapValues(\.keys) }

    /// Takes the home of `vault` back to what the previous version left: the schema without the keyring
    /// table (every migration but the newest) and the keyring in its sealed file, written as that version's
    /// `Keyring.save` wrote it (sealed bytes, then `SecureFiles.write`).
    static func makePreviousVersionHome(_ vault: PatientVault) async throws -> Keyring {
        let ring = await vault.keyring
        let account = vault.account
        try await vault.store.queue.write { db in
            try db.execute(sql: "DROP TABLE keyring")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [LocalStore.keyringTable.identifier])
        }
        let seal = Keyring.Seal(key: account.localStorageKey, ownerID: account.profile.userID)
        try SecureFiles.write(try ring.sealed(seal), to: account.store.keyringURL)
        return ring
    }

    @Test func aHomeOfThePreviousVersionWithAKeyringFileOpensKeepsEveryKeyAndSyncs() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (vault, password) = try await world.patient("kira", on: device)
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.addActivity(try Sample.activity("scale", category: "assessments"))
            _ = try await vault.sync()
            try await vault.rotate(category: "interventions", reencrypt: false)
            // Written before the move and not sent yet: sealed under the keys that move.
            try await vault.addActivity(try Sample.activity("run"))
            let ring = try await Self.makePreviousVersionHome(vault)
            let account = vault.account
            #expect(ring["interventions"]?.keys.count == 2)
            #expect(try await vault.store.queue.read { db in try db.tableExists("keyring") } == false)

            let reopened = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
            #expect(Self.keys(await reopened.keyring) == Self.keys(ring), "every key of every epoch moved")
            #expect(!FileManager.default.fileExists(atPath: account.store.keyringURL.path), "the file is gone once the row holds it")
            #expect(!FileManager.default.fileExists(atPath: LocalStore.movedKeyringURL(account.store.keyringURL).path))
            let seal = Keyring.Seal(key: account.localStorageKey, ownerID: account.profile.userID)
            let row = try reopened.store.read { tx in try tx.keyring(seal) }
            #expect(Self.keys(row) == Self.keys(ring))
            #expect(SecureFiles.permissions(account.store.storeURL) == 0o600)
            #expect(try await reopened.activities().map(\.id).sorted() == ["run", "scale", "walk"], "records written before still open")

            // Syncs with nothing lost: the unsent record goes out, and a new device reads all three.
            let summary = try await reopened.sync()
            #expect(summary.pushed == 1)
            let other = try await world.device("b").loginPatient("kira", password: password)
            _ = try await other.sync()
            #expect(try await other.activities().map(\.id).sorted() == ["run", "scale", "walk"])
            // A later rotation writes keys only to the row.
            try await reopened.rotate(category: "interventions", reencrypt: false)
            #expect(!FileManager.default.fileExists(atPath: account.store.keyringURL.path))
            #expect(try reopened.store.read { tx in try tx.keyring(seal) }["interventions"]?.currentEpoch == 3)
        }
    }

    @Test func aCrashBetweenCommittingTheRowAndRemovingTheFileStillOpensWithTheKeys() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (vault, _) = try await world.patient("lena", on: device)
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let ring = try await Self.makePreviousVersionHome(vault)
            let account = vault.account
            let file = account.store.keyringURL
            let fileBytes = try #require(try SecureFiles.read(file))
            let moved = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
            #expect(Self.keys(await moved.keyring) == Self.keys(ring))

            // The row is committed and the file is still there (the crash came before the rename), or only
            // its renamed copy is (the crash came before the erase): both open with every key, and clean up.
            for leftover in [file, LocalStore.movedKeyringURL(file)] {
                try SecureFiles.write(fileBytes, to: leftover)
                let reopened = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
                #expect(Self.keys(await reopened.keyring) == Self.keys(ring), "\(leftover.lastPathComponent)")
                #expect(try await reopened.activities().map(\.id) == ["walk"])
                #expect(!FileManager.default.fileExists(atPath: file.path))
                #expect(!FileManager.default.fileExists(atPath: LocalStore.movedKeyringURL(file).path))
            }

            // A file that holds a key the row lacks (an earlier version ran on this home again): merged, none lost.
            var extra = ring
            extra.merge(Tresor.create(ownerID: account.profile.userID, category: "assessments"))
            let seal = Keyring.Seal(key: account.localStorageKey, ownerID: account.profile.userID)
            try SecureFiles.write(try extra.sealed(seal), to: file)
            let merged = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
            #expect(Self.keys(await merged.keyring) == Self.keys(extra))
        }
    }

    @Test func aKeyringFileThatDoesNotOpenIsReportedAndKept() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (vault, _) = try await world.patient("mira", on: device)
            try await vault.addActivity(try Sample.activity("walk"))
            let ring = try await Self.makePreviousVersionHome(vault)
            let account = vault.account
            let file = account.store.keyringURL
            var damaged = try #require(try SecureFiles.read(file))
            damaged[damaged.count / 2] ^= 0x01
            try SecureFiles.write(damaged, to: file)
            #expect(throws: ClientError.self) {
                _ = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
            }
            #expect(try SecureFiles.read(file) == damaged, "a file that does not open is never removed")
            // Put back whole, it moves in with its keys.
            let seal = Keyring.Seal(key: account.localStorageKey, ownerID: account.profile.userID)
            try SecureFiles.write(try ring.sealed(seal), to: file)
            let reopened = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
            #expect(Self.keys(await reopened.keyring) == Self.keys(ring))
            #expect(try await reopened.activities().map(\.id) == ["walk"])
        }
    }

    /// Keys, ledgers and marks are taken in one transaction: when the server rolls back one category's
    /// self-grant in a way this device cannot declare again (a new device that knows the newer epoch only from
    /// a record's header), what it shows of another category is not kept either.
    @Test func aRefusedSelfGrantKeepsNothingOfTheSameReconcile() async throws {
        typealias H = HostileMembershipTests
        try await ClientWorld.run(.sqlite) { world in
            let (a, password) = try await world.patient("pat", on: try world.device("a"))
            try await a.addActivity(try Sample.activity("walk"))
            try await a.addActivity(try Sample.activity("scale", category: "assessments"))
            _ = try await a.sync()
            let tresorID = Tresor.id(ownerID: a.account.profile.userID, category: "interventions")
            let old = try #require(try await world.repository.tresor(id: tresorID))
            try await a.rotate(category: "interventions", reencrypt: false)
            try await a.addActivity(try Sample.activity("run"))
            _ = try await a.sync()
            // The server puts back the old self-grant of interventions; a new device then sees the record under
            // the newer epoch but holds no key of it.
            let rollBack = {
                try await world.repository.databaseOperator.setSelfGrant(
                    owner: "pat",
                    category: "interventions",
                    old.selfGrant,
                    epoch: old.currentEpoch
                )
            }
            try await rollBack()
            let c = try await world.device("c").loginPatient("pat", password: password)
            await #expect(throws: ClientError.self) { _ = try await c.sync() }
            // Device A starts a new epoch of assessments (declaring interventions again on the way: it holds its
            // keys), and the server rolls interventions back once more.
            try await a.rotate(category: "assessments", reencrypt: false)
            try await rollBack()
            let before = try c.store.ledgerState(category: "assessments")
            await #expect(throws: ClientError.self) { _ = try await c.sync() }
            let seal = Keyring.Seal(key: c.account.localStorageKey, ownerID: c.account.profile.userID)
            #expect(try c.store.read { tx in try tx.keyring(seal) }["assessments"]?.currentEpoch ?? 1 == 1, "no key of that reconcile kept")
            #expect(await c.keyring["assessments"]?.currentEpoch ?? 1 == 1)
            #expect(try c.store.ledgerState(category: "assessments") == before, "no mark of that reconcile kept")
        }
    }
}
