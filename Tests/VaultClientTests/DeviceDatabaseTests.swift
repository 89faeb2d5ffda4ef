import Foundation
import GRDB
import Testing
import VaultCore
import VaultCrypto

@testable import VaultClient

/// The one database of an account on a device, and its one list of migrations per role. A home written by
/// the previous version is built here by running the migrations that version had (the schema it left) and
/// writing data through the same statements it used; opening it now must keep everything. The keyring file
/// it kept beside the database is moved in by the vault (KeyringMoveTests).
@Suite("Client: one device database, migrated in place")
struct DeviceDatabaseTests {
    /// The identifiers are those earlier versions recorded: renaming one would run its migration again.
    @Test func everyMigrationIsListedOnceInOrderUnderTheIdentifierItWasWrittenWith() {
        #expect(
            DeviceDatabase.patient.map(\.identifier) == [
                "v1-local", "v2-quarantine", "v3-tresor-ledger", "v4-state-commitments", "v5-binary-envelopes",
                "v6-owed-revocations", "v7-binary-commitments", "v8-keyring",
            ]
        )
        #expect(
            DeviceDatabase.doctor.map(\.identifier) == [
                "v1-doctor-cache", "v2-doctor-quarantine", "v3-doctor-revoked-shares", "v4-doctor-commitments",
                "v5-doctor-binary-envelopes", "v6-doctor-revoked-requests", "v7-doctor-binary-commitments",
                "v8-doctor-quarantine-by-tresor", "v9-doctor-pending-records", "v10-doctor-parked-reads",
            ]
        )
    }

    /// A commitment of `sealed`'s tresor, as its patient signs one.
    static func commitment(_ sealed: SealedRecords) -> StateCommitment {
        StateCommitment.make(
            patient: sealed.identity,
            tresorID: sealed.tresor.id,
            category: sealed.tresor.category,
            sequence: 3,
            state: HeadSet(),
            topEpoch: 1,
            tresorVersion: 1,
            committedAt: 1_700_000_000_000
        )
    }

    @Test func aPatientsStoreFromThePreviousVersionKeepsItsRecordsCursorAndAcceptedCommitment() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let accepted = Self.commitment(sealed)
            let walk = try sealed.activity("walk", at: 1_000)
            let run = try sealed.activity("run", at: 2_000)
            // The previous version's schema ended at v6 (v7 and v8 came with this one).
            let previous = try DeviceDatabase.open(at: url, migrations: Array(DeviceDatabase.patient.prefix(6)))
            try await previous.write { db in
                let tx = LocalStore.Transaction(db: db)
                try tx.put(walk, outbox: false, serverTimestamp: walk.header.timestamp)
                try tx.put(run, outbox: true)
                try tx.setCursor(42)
                var states = ServerStates()
                states.remember(accepted)
                try states.save(tx)
                // That version could still hold the commitment as JSON, as versions before it wrote it.
                try db.execute(sql: "UPDATE server_state SET commitment = ?", arguments: [try LocalStore.encoder.encode(accepted)])
            }
            try previous.close()

            let store = try LocalStore(url: url)
            #expect(try store.cursor() == 42, "the cursor is never reset")
            #expect(try store.serverStates().commitments == [sealed.tresor.id: accepted], "nor the accepted commitment")
            #expect(try Set(store.records().map(\.envelope.versionID)) == [walk.versionID, run.versionID])
            #expect(try store.outbox(limit: 10).map(\.versionID) == [run.versionID])
            let raw = try await store.queue.read { db in try Data.fetchAll(db, sql: "SELECT commitment FROM server_state") }
            #expect(raw.count == 1 && raw.allSatisfy { $0.first != UInt8(ascii: "{") }, "converted to binary")
            let applied = try await store.queue.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }
            #expect(Set(applied) == Set(DeviceDatabase.patient.map(\.identifier)))
        }
    }

    @Test func aDoctorsCacheFromThePreviousVersionKeepsItsCursorsAndAcceptedCommitments() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let accepted = Self.commitment(sealed)
            // A version that still wrote commitments as JSON: its schema ended at v6.
            let previous = try DeviceDatabase.open(at: url, migrations: Array(DeviceDatabase.doctor.prefix(6)))
            try await previous.write { db in
                try db.execute(
                    sql: "INSERT INTO cursors (owner_id, tresor_id, cursor) VALUES (?, ?, 7)",
                    arguments: [owner.uuidString, sealed.tresor.id.uuidString]
                )
                let empty = HeadSet()
                try db.execute(
                    sql: """
                        INSERT INTO share_state (owner_id, tresor_id, state, live, deleted, hlc_physical, hlc_counter, hlc_device, commitment)
                        VALUES (?, ?, ?, 0, 0, ?, ?, ?, ?)
                        """,
                    arguments: [
                        owner.uuidString, sealed.tresor.id.uuidString, Data(empty.hash.bytes), Int64(empty.newest.physicalMs),
                        Int64(empty.newest.counter), empty.newest.deviceID, try LocalStore.encoder.encode(accepted),
                    ]
                )
            }
            try previous.close()

            let cache = try DoctorCache(url: url)
            #expect(try await cache.cursor(owner: owner, tresor: sealed.tresor.id) == 7)
            #expect(try await cache.acceptedCommitments(owner: owner) == [sealed.tresor.id: accepted])
        }
    }

    /// A doctor's cache, like a patient's store, is a WAL database with NORMAL sync, and the database, its
    /// log and its index are owner-only whatever the umask; a cache written in the rollback journal before
    /// opens in WAL and keeps what it held.
    /// A database a newer version migrated further is refused with a plain message, not read: what its
    /// rows mean may have changed (a first read parked among a doctor's heads).
    @Test func aDatabaseANewerVersionMigratedIsRefused() async throws {
        try await SealedRecords.withTemporaryFile("cache.sqlite") { url in
            let future = DeviceDatabase.doctor + [DeviceDatabase.Migration("v99-doctor-from-the-future", sql: "CREATE TABLE later (x INTEGER)")]
            try DeviceDatabase.open(at: url, migrations: future).close()
            #expect {
                _ = try DoctorCache(url: url)
            } throws: { error in
                guard case let .localState(message)? = error as? ClientError else { return false }
                return message.contains("newer version")
            }
            // The same database opened by the version that wrote it is fine.
            try DeviceDatabase.open(at: url, migrations: future).close()
        }
    }

    @Test func aDoctorsCacheIsOwnerOnlyInWALMode() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let owner = UUID()
            let tresor = UUID()
            let previous = try DeviceDatabase.open(at: url, migrations: DeviceDatabase.doctor)
            let before = try await previous.write { db in
                try DoctorCache.saveCursor(db, owner: owner.uuidString, tresor: tresor.uuidString, 5)
                return try String.fetchOne(db, sql: "PRAGMA journal_mode")
            }
            #expect(before == "delete")
            try previous.close()
            let old = umask(0o022)
            defer { umask(old) }
            let cache = try DoctorCache(url: url)
            let (mode, sync) = try await cache.queue.read { db in
                (try String.fetchOne(db, sql: "PRAGMA journal_mode"), try Int.fetchOne(db, sql: "PRAGMA synchronous"))
            }
            #expect(mode == "wal" && sync == 1, "WAL with NORMAL (1) sync")
            #expect(try await cache.cursor(owner: owner, tresor: tresor) == 5)
            // A cache created before keeps its pages of 4 KiB; one created now has pages of 64 KiB.
            #expect(try await cache.queue.read { try Int.fetchOne($0, sql: "PRAGMA page_size") } == 4_096)
            let fresh = try DoctorCache(url: url.deletingLastPathComponent().appendingPathComponent("fresh-\(UUID().uuidString).sqlite"))
            #expect(try await fresh.queue.read { try Int.fetchOne($0, sql: "PRAGMA page_size") } == DeviceDatabase.cachePageSize)
            #expect(try await fresh.queue.read { try Int.fetchOne($0, sql: "PRAGMA journal_size_limit") } == DeviceDatabase.cacheLogLimit)
            #expect(try await fresh.cursor(owner: owner, tresor: tresor) == 0)
            for suffix in ["", "-wal", "-shm"] {
                let mode = try FileManager.default.attributesOfItem(atPath: url.path + suffix)[.posixPermissions] as? Int
                #expect(mode == 0o600, "store.sqlite\(suffix): \(String(mode ?? 0, radix: 8))")
            }
        }
    }

    /// The quarantine of a cache written before it was keyed by tresor: every row carried over under the
    /// tresor it recorded, and from then on held and released by that share only.
    @Test func aDoctorsQuarantineFromBeforeTheTresorKeyKeepsEachRowWithItsShare() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let other = Tresor.create(ownerID: owner, category: "assessments")
            let rows = [
                (
                    sealed.tresor.id,
                    QuarantinedRecord(sequence: 5, recordID: sealed.recordID("walk").hex, versionID: "v-walk", reason: .invalidSignature)
                ),
                (other.id, QuarantinedRecord(sequence: 6, recordID: nil, versionID: nil, reason: .malformed)),
            ]
            let previous = try DeviceDatabase.open(
                at: url,
                migrations: Array(DeviceDatabase.doctor.prefix { $0.identifier != "v8-doctor-quarantine-by-tresor" })
            )
            try await previous.write { db in
                for (tresor, q) in rows {
                    // As the previous version wrote them.
                    try db.execute(
                        sql:
                            "INSERT OR REPLACE INTO quarantine (owner_id, tresor_id, sequence, record_id, version_id, reason) VALUES (?, ?, ?, ?, ?, ?)",
                        arguments: [owner.uuidString, tresor.uuidString, Int64(q.sequence), q.recordID, q.versionID, q.reason.rawValue]
                    )
                }
            }
            try previous.close()

            let cache = try DoctorCache(url: url)
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id) == [rows[0].1])
            #expect(try await cache.quarantined(owner: owner, tresor: other.id) == [rows[1].1])
            // The key now names the tresor: the other share's row at the same sequence and its release leave this one.
            let moved = QuarantinedRecord(sequence: 5, recordID: nil, versionID: nil, reason: .wrongContext)
            try await cache.store([.failed(moved)], release: [6], owner: owner, tresor: other.id, cursor: nil)
            try await cache.store([], release: [5], owner: owner, tresor: other.id, cursor: nil)
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id) == [rows[0].1])
            #expect(try await cache.quarantined(owner: owner, tresor: other.id).isEmpty)
        }
    }
}
