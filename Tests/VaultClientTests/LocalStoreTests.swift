import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient

/// Sealed envelopes of one owner's records, for exercising the local stores without a server.
struct SealedRecords {
    let identity: Identity
    let tresor: Tresor
    let device = "device-1"

    /// A new owner's records of `category`, or another category of `identity`'s.
    init(identity: Identity = Identity.generate(), category: String = "interventions") {
        self.identity = identity
        tresor = Tresor.create(ownerID: identity.userID, category: category)
    }

    /// Version `physicalMs` of activity `id` (a tombstone when `deleted`).
    func activity(_ id: String, at physicalMs: UInt64, deleted: Bool = false) throws -> Envelope {
        let record: CareRecord? = deleted ? nil : .activity(try Sample.activity(id, category: tresor.category))
        let header = RecordHeader(
            ownerID: identity.userID,
            tresorID: tresor.id,
            category: tresor.category,
            epoch: tresor.currentEpoch,
            recordType: .activity,
            recordID: recordID(id),
            timestamp: timestamp(physicalMs),
            deleted: deleted,
            authorID: identity.userID
        )
        return try Envelope.seal(record: record, type: .activity, header: header, key: tresor.currentKey, author: identity.signing)
    }

    func recordID(_ id: String) -> RecordID {
        RecordID.make(type: .activity, activityID: id, occurrence: nil, key: identity.recordIDKey)
    }

    func timestamp(_ physicalMs: UInt64) -> HLCTimestamp {
        HLCTimestamp(physicalMs: physicalMs, counter: 0, deviceID: device)
    }

    /// A fresh file under the temporary folder, removed after `body`.
    static func withTemporaryFile<T>(_ name: String, _ body: (URL) async throws -> T) async throws -> T {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        return try await body(folder.appendingPathComponent(name))
    }
}

struct Refused: Error {}

@Suite("Client: the local store's transactions")
struct LocalStoreTests {
    @Test func aFailedTransactionLeavesCursorRecordsOutboxAndClockUnchanged() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let store = try LocalStore(url: url)
            let walk = try sealed.activity("walk", at: 1_000)
            try store.write(deviceID: sealed.device) { tx, clock in
                _ = try clock.tick(wallClockMs: 1_000)
                try tx.put(walk, outbox: true)
                try tx.setCursor(5)
            }
            let clockBefore = try store.write { try $0.clock(deviceID: sealed.device) }.last

            // A page that stores a record, drops the outbox entry, moves the clock and the cursor, then fails.
            #expect(throws: Refused.self) {
                try store.write(deviceID: sealed.device) { tx, clock in
                    _ = try clock.receive(sealed.timestamp(9_000), wallClockMs: 9_000)
                    try tx.put(try sealed.activity("run", at: 9_000), outbox: false, serverTimestamp: sealed.timestamp(9_000))
                    try tx.put(try sealed.activity("walk", at: 9_001, deleted: true), outbox: false)
                    try tx.dropOutbox(recordID: walk.header.recordID.hex)
                    try tx.setCursor(9)
                    throw Refused()
                }
            }
            #expect(try store.cursor() == 5)
            #expect(try store.records().map(\.envelope.versionID) == [walk.versionID])
            #expect(try store.outbox(limit: 10).map(\.versionID) == [walk.versionID])
            #expect(try store.write { try $0.clock(deviceID: sealed.device) }.last == clockBefore)
        }
    }

    @Test func aChangeAndItsOutboxEntryLandTogetherAndANewerOneReplacesIt() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let store = try LocalStore(url: url)
            let first = try sealed.activity("walk", at: 1_000)
            try store.write { try $0.put(first, outbox: true) }
            let row = try #require(try store.record(sealed.recordID("walk")))
            #expect(row.pending && row.serverTimestamp == nil && !row.deleted)
            #expect(try store.outbox(limit: 10).map(\.versionID) == [first.versionID])

            let second = try sealed.activity("walk", at: 2_000, deleted: true)
            try store.write { try $0.put(second, outbox: true) }
            #expect(try store.outbox(limit: 10).map(\.versionID) == [second.versionID], "one unsent version per record")
            #expect(try store.record(sealed.recordID("walk"))?.deleted == true)
            #expect(try store.outboxCount() == 1)
        }
    }

    @Test func acknowledgingABatchDropsItsEntriesAndKeepsTheRefusals() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let store = try LocalStore(url: url)
            let walk = try sealed.activity("walk", at: 2_000)
            let run = try sealed.activity("run", at: 2_000)
            try store.write { tx in
                try tx.put(walk, outbox: true)
                try tx.put(run, outbox: true)
            }
            let batch = try store.outbox(limit: 10)
            #expect(batch.count == 2)
            var states = try store.serverStates()
            try store.write { tx in
                try states.acknowledge([(batch[0], true)], tx)
                try tx.reject(batch[1], reason: "clock_skew: ahead of the server", at: 1)
                try states.save(tx)
            }
            #expect(try store.outboxCount() == 0)
            #expect(try store.rejections() == ["clock_skew: ahead of the server"])
            #expect(try store.record(sealed.recordID("walk"))?.serverTimestamp == sealed.timestamp(2_000))
            // The acknowledged version is the server's head of its record in the device's copy of the
            // server's state, as a pulled one would be; the refused one is not.
            let head = HeadSet.Head(versionID: batch[0].versionID, deleted: false, timestamp: walk.header.timestamp)
            var expected = HeadSet()
            try expected.replace(recordID: walk.header.recordID.hex, old: nil, with: head)
            #expect(try store.serverStates().sets[walk.header.tresorID] == expected)
            #expect(try store.read { try $0.serverHead(walk.header.recordID.hex) }?.versionID == head.versionID)
            #expect(try store.read { try $0.serverHead(run.header.recordID.hex) } == nil)
            // Acknowledged again (a repeated push the server calls a duplicate): nothing changes.
            try store.write { try $0.put(walk, outbox: true) }
            let again = try store.outbox(limit: 10)
            #expect(again.map(\.versionID) == [head.versionID])
            try store.write { tx in
                try states.acknowledge([(again[0], true)], tx)
                try states.save(tx)
            }
            #expect(try store.serverStates().sets[walk.header.tresorID] == expected)
            #expect(try store.outboxCount() == 0)
            // What the server showed only moves forward.
            try store.write { try $0.advanceServerTimestamp(walk.header.recordID.hex, sealed.timestamp(1_000)) }
            #expect(try store.record(sealed.recordID("walk"))?.serverTimestamp == sealed.timestamp(2_000))
            // A record the device does not hold gets no server timestamp (and no row).
            try store.write { try $0.advanceServerTimestamp(sealed.recordID("absent").hex, sealed.timestamp(3_000)) }
            #expect(try store.record(sealed.recordID("absent")) == nil)
        }
    }

    @Test func theStoreSurvivesReopeningWithItsCursorClockAndOutbox() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let stamp = try LocalStore(url: url).write(deviceID: sealed.device) { tx, clock in
                try tx.put(try sealed.activity("walk", at: 1_000), outbox: true)
                try tx.setCursor(42)
                return try clock.tick(wallClockMs: 5_000)
            }
            let reopened = try LocalStore(url: url)
            #expect(try reopened.cursor() == 42)
            #expect(try reopened.outboxCount() == 1)
            #expect(try reopened.write { try $0.clock(deviceID: sealed.device) }.last == stamp)
            #expect(try reopened.write { try $0.clock(deviceID: "another-device") }.last.physicalMs == 0, "a clock is per device")
            #expect(SecureFiles.permissions(url) == 0o600)
        }
    }
}

@Suite("Client: a bad change of a pulled page is kept aside, the rest is applied")
struct PulledPageTests {
    @Test func aPageWithOneBadChangeAppliesTheRestAndMovesTheCursor() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (vaultA, password) = try await world.patient("pat", on: try world.device("a"))
            try await vaultA.addActivity(try Sample.activity("walk"))
            _ = try await vaultA.sync()
            let vaultB = try await world.device("b").loginPatient("pat", password: password)
            _ = try await vaultB.sync()
            let cursor = try vaultB.store.cursor()
            // A version under a tresor this account does not have, then a valid new version.
            try await vaultA.addActivity(try Sample.activity("run"))
            let runID = await vaultA.recordID(activity: "run")
            let run = try #require(try vaultA.store.record(runID))
            let stranger = try SealedRecords().activity("stray", at: 1_000)
            let page = [PulledChange(sequence: cursor + 1, envelope: stranger), PulledChange(sequence: cursor + 2, envelope: run.envelope)]
            _ = try await vaultB.apply(page, release: [], cursor: cursor + 2)
            #expect(try vaultB.store.cursor() == cursor + 2)
            #expect(try await vaultB.activities().map(\.id) == ["run", "walk"])
            #expect(try await vaultB.pendingCount() == 0)
            #expect(
                try await vaultB.quarantined() == [
                    QuarantinedRecord(
                        sequence: cursor + 1,
                        recordID: stranger.header.recordID.hex,
                        versionID: stranger.versionID,
                        reason: .wrongContext
                    )
                ]
            )

            // Released (the server no longer holds a change there): the quarantine is empty again.
            _ = try await vaultB.apply([], release: [cursor + 1], cursor: nil)
            #expect(try await vaultB.quarantined().isEmpty)
            #expect(try vaultB.store.cursor() == cursor + 2)
        }
    }
}
