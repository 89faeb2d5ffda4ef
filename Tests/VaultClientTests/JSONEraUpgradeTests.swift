import Foundation
import GRDB
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// Data written before the binary encoding (Docs/envelope-v1.md §7): a server whose versions hold the JSON
/// of their time, and device stores that kept JSON. Everything must still open, verify and sync.
@Suite("Upgrade: envelopes stored as JSON before the binary encoding")
struct JSONEraUpgradeTests {
    /// Rewrites every served envelope as the JSON the server stored before the binary encoding (the same
    /// encoder, sorted keys, slashes unescaped), as an older server's database holds it.
    static func rewriteAsJSON(_ world: ClientWorld, _ backend: Backend, owner: UUID) async throws -> [String: [UInt8]] {
        try await MaliciousServerTests.allowTampering(world.repository, backend)
        var json: [String: [UInt8]] = [:]
        for change in try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100_000) {
            let envelope = try Envelope(binary: change.envelope)
            let bytes = Array(try VaultResponseEncoder.json.encode(envelope))
            json[envelope.versionID] = bytes
            try await world.repository.databaseOperator.replaceStoredEnvelope(of: envelope.versionID, with: bytes)
        }
        let stored = try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100_000)
        #expect(stored.allSatisfy { $0.envelope.first == UInt8(ascii: "{") }, "every head is JSON, as an older server left it")
        return json
    }

    @Test(arguments: Backend.allCases)
    func aServerDatabaseOfJSONEnvelopesServesEveryClient(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, password) = try await world.patient("pat", on: try world.device("a"))
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            for id in ["walk", "run", "swim"] { try await vault.addActivity(try Sample.activity(id)) }
            _ = try await vault.recordOutcome(activityID: "walk", occurrence: 0, value: Sample.value(3))
            try await vault.removeActivity(id: "swim")
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            let owner = vault.account.profile.userID
            let json = try await Self.rewriteAsJSON(world, backend, owner: owner)

            // A new device pulls binary pages: each JSON envelope goes out in its binary encoding, verifies,
            // and the patient's commitment (over version ids, the same in either form) still holds.
            let fresh = try await world.device("b").loginPatient("pat", password: password)
            let summary = try await fresh.sync()
            #expect(summary.quarantined.isEmpty)
            #expect(try await fresh.activities().map(\.id) == ["run", "walk"])
            #expect(try fresh.store.records(type: .outcome).count == 1)
            #expect(try fresh.store.records().allSatisfy { json[$0.envelope.versionID] != nil })
            let view = try await doctor.view(patient: "pat")
            #expect(view.activities.map(\.id) == ["run", "walk"] && view.outcomes.count == 1)
            #expect(view.incomplete.isEmpty && view.quarantined.isEmpty)

            // New versions are stored in binary beside the old ones.
            try await vault.updateActivity(try Sample.activity("run", title: "after the upgrade"))
            _ = try await vault.sync()
            let heads = try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100)
            #expect(heads.filter { $0.envelope.first == Envelope.formatVersion }.count == 1)
            _ = try await fresh.sync()
            #expect(try await fresh.activity(id: "run")?.title == "after the upgrade")
        }
    }

    /// Sets `table`'s envelopes back to JSON and forgets the conversion, as a store written before it.
    static func makeJSONEra(_ url: URL, tables: [String], migration: String) throws {
        let queue = try DatabaseQueue(path: url.path)
        try queue.write { db in
            for table in tables {
                for row in try Row.fetchAll(db, sql: "SELECT rowid AS rid, envelope FROM \(table)") {
                    let json = try LocalStore.encoder.encode(try Envelope(binary: Array(row["envelope"] as Data)))
                    try db.execute(sql: "UPDATE \(table) SET envelope = ? WHERE rowid = ?", arguments: [json, row["rid"] as Int64])
                }
            }
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [migration])
        }
        try queue.close()
    }

    /// The first byte of every envelope in `table`.
    static func firstBytes(_ url: URL, _ table: String) throws -> Set<UInt8> {
        try DatabaseQueue(path: url.path).read { db in Set(try Data.fetchAll(db, sql: "SELECT envelope FROM \(table)").compactMap(\.first)) }
    }

    @Test func aDeviceStoreOfJSONEnvelopesIsConvertedWhenItOpens() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (vault, password) = try await world.patient("pat", on: try world.device("a"))
            for id in ["walk", "run"] { try await vault.addActivity(try Sample.activity(id)) }
            _ = try await vault.sync()
            try await vault.addActivity(try Sample.activity("swim"))  // waits in the outbox
            let before = try vault.store.records().map(\.envelope.versionID).sorted()
            let url = vault.account.store.storeURL
            try Self.makeJSONEra(url, tables: ["records", "outbox"], migration: "v5-binary-envelopes")
            #expect(try Self.firstBytes(url, "records") == [UInt8(ascii: "{")])

            let reopened = try await world.device("a").loginPatient("pat", password: password)
            #expect(try Self.firstBytes(url, "records") == [Envelope.formatVersion])
            #expect(try Self.firstBytes(url, "outbox") == [Envelope.formatVersion])
            #expect(try reopened.store.records().map(\.envelope.versionID).sorted() == before)
            #expect(try await reopened.activities().map(\.id) == ["run", "swim", "walk"])
            // The outbox item goes out as it was signed.
            #expect(try await reopened.sync().pushed == 1)
            let other = try await world.device("b").loginPatient("pat", password: password)
            _ = try await other.sync()
            #expect(try await other.activities().map(\.id) == ["run", "swim", "walk"])
        }
    }

    @Test func aDoctorCacheOfJSONEnvelopesIsConvertedWhenItOpens() async throws {
        try await SealedRecords.withTemporaryFile("cache.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            do {
                let cache = try DoctorCache(url: url)
                let entries = try ["walk", "run"].enumerated().map { i, id in
                    let env = try sealed.activity(id, at: 1_000)
                    return DoctorCache.Pulled.verified(
                        DoctorCache.Entry(sequence: UInt64(i + 1), header: env.header, versionID: env.versionID, bytes: StoredEnvelope.encode(env))
                    )
                }
                try await cache.store(entries, release: [], owner: owner, tresor: sealed.tresor.id, cursor: 2)
            }
            try Self.makeJSONEra(url, tables: ["shared_records"], migration: "v5-doctor-binary-envelopes")
            #expect(try Self.firstBytes(url, "shared_records") == [UInt8(ascii: "{")])
            let reopened = try DoctorCache(url: url)
            #expect(try Self.firstBytes(url, "shared_records") == [Envelope.formatVersion])
            let live = try await reopened.liveEnvelopes(owner: owner, tresor: sealed.tresor.id).map { try StoredEnvelope.decode($0) }
            #expect(Set(live.map(\.header.recordID)) == [sealed.recordID("walk"), sealed.recordID("run")])
            for env in live { try env.verify(authorKey: sealed.identity.signing.publicKey) }
            #expect(try await reopened.cursor(owner: owner, tresor: sealed.tresor.id) == 2, "nothing is pulled again")
        }
    }

    @Test func storedBytesInNeitherFormAreAnErrorNotACrash() throws {
        let damaged = Data(#"{"header":"#.utf8)
        #expect(throws: ClientError.self) { try StoredEnvelope.decode(damaged) }
        #expect(throws: ClientError.self) { try StoredEnvelope.decode(Data([1, 2, 3])) }
        // After the conversion nothing at rest is read as JSON: a JSON row left behind reads as damage.
        let json = try LocalStore.encoder.encode(try SealedRecords().activity("walk", at: 1_000))
        #expect(throws: ClientError.self) { try StoredEnvelope.decode(json) }
    }
}
