import Foundation
import Testing
import VaultCore

@testable import VaultClient

@Suite("Client: the doctor's cache")
struct DoctorCacheTests {
    static func entry(_ env: Envelope, sequence: UInt64 = 1) throws -> DoctorCache.Pulled {
        .verified(DoctorCache.Entry(sequence: sequence, header: env.header, versionID: env.versionID, bytes: StoredEnvelope.encode(env)))
    }

    /// Dropping one share's records held pending leaves every other share's, whether the share sorts
    /// before, between or after the others; the last share's drop empties the table.
    @Test func droppingOneSharesPendingRecordsKeepsTheOthers() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let cache = try DoctorCache(url: url)
            let shares = ["00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002", "00000000-0000-0000-0000-000000000003"]
            let env = try sealed.activity("walk", at: 1_000)
            for tresor in shares {
                try await cache.stage(
                    [try Self.entry(env, sequence: 1), try Self.entry(env, sequence: 2)],
                    owner: owner,
                    tresor: UUID(uuidString: tresor)!,
                    cursor: nil
                )
            }
            func left() async throws -> [String] {
                try await cache.queue.read { db in try String.fetchAll(db, sql: "SELECT tresor_id FROM pending_records ORDER BY tresor_id, sequence")
                }
            }
            for (drop, expected) in [(1, [0, 0, 2, 2]), (0, [2, 2]), (2, [])] {
                try await cache.queue.write { db in
                    try DoctorCache.dropPending(db, owner: owner.uuidString, tresor: shares[drop].uppercased(), sequences: nil)
                }
                #expect(try await left() == expected.map { shares[$0].uppercased() }, "after dropping share \(drop)")
            }
        }
    }

    @Test func aCursorPerShareSurvivesReopening() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let interventions = SealedRecords()
            let owner = interventions.identity.userID
            let assessments = Tresor.create(ownerID: owner, category: "assessments")
            let cache = try DoctorCache(url: url)
            #expect(try await cache.cursor(owner: owner, tresor: interventions.tresor.id) == 0)
            try await cache.store(
                [try Self.entry(try interventions.activity("walk", at: 1_000))],
                release: [],
                owner: owner,
                tresor: interventions.tresor.id,
                cursor: 7
            )
            try await cache.store([], release: [], owner: owner, tresor: assessments.id, cursor: 3)

            let reopened = try DoctorCache(url: url)
            #expect(try await reopened.cursor(owner: owner, tresor: interventions.tresor.id) == 7)
            #expect(try await reopened.cursor(owner: owner, tresor: assessments.id) == 3)
            #expect(try await reopened.cursor(owner: UUID(), tresor: interventions.tresor.id) == 0, "another patient's share starts afresh")
            #expect(try await reopened.liveEnvelopes(owner: owner, tresor: interventions.tresor.id).count == 1)
            #expect(try await reopened.liveEnvelopes(owner: owner, tresor: assessments.id).isEmpty)
            #expect(SecureFiles.permissions(url) == 0o600)
        }
    }

    @Test func aNewerVersionReplacesTheHeadAndATombstoneHidesIt() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let cache = try DoctorCache(url: url)
            let v1 = try sealed.activity("walk", at: 1_000)
            let page = [try Self.entry(v1, sequence: 1), try Self.entry(try sealed.activity("run", at: 1_000), sequence: 2)]
            try await cache.store(page, release: [], owner: owner, tresor: sealed.tresor.id, cursor: 2)
            let tombstone = try Self.entry(try sealed.activity("walk", at: 2_000, deleted: true), sequence: 3)
            try await cache.store([tombstone], release: [], owner: owner, tresor: sealed.tresor.id, cursor: 3)
            let live = try await cache.liveEnvelopes(owner: owner, tresor: sealed.tresor.id)
            #expect(try live.map { try StoredEnvelope.decode($0).header.recordID } == [sealed.recordID("run")])
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id).isEmpty)
        }
    }

    /// A view takes from its refresh only the records whose version is a live head now (`OpenedRecords`,
    /// `liveHeads`): a record opened at a version since replaced, or never stored, is not asked for, and
    /// its head is read from the cache as stored.
    @Test func aViewTakesOnlyTheRecordsOfTheVersionsTheCacheHolds() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let cache = try DoctorCache(url: url)
            let walk1 = try sealed.activity("walk", at: 1_000)
            let walk2 = try sealed.activity("walk", at: 2_000)
            let run = try sealed.activity("run", at: 1_000)
            let stray = try sealed.activity("swim", at: 1_000)
            try await cache.store(
                [try Self.entry(walk1, sequence: 1), try Self.entry(run, sequence: 2)],
                release: [],
                owner: owner,
                tresor: sealed.tresor.id,
                cursor: 2
            )
            try await cache.store([try Self.entry(walk2, sequence: 3)], release: [], owner: owner, tresor: sealed.tresor.id, cursor: 3)
            let opened = OpenedRecords()
            let context = EnvelopeContext(ownerID: owner, tresorID: sealed.tresor.id, category: sealed.tresor.category)
            let record = { (env: Envelope) in
                try #require(try env.openRecordVerifiedEarlier(keys: sealed.tresor.keys, expecting: context).record)
            }
            for env in [walk1, run, stray] { opened.keep(env.versionID, try record(env)) }
            let page = try #require(try await cache.liveHeads(owner: owner, tresor: sealed.tresor.id, after: "", limit: 10, take: opened.take))
            var taken: [CareRecord] = []
            var sealedVersions: [String] = []
            for head in page.heads {
                switch head {
                case let .taken(r): taken.append(r)
                case let .sealed(bytes): sealedVersions.append(try StoredEnvelope.decode(bytes).versionID)
                }
            }
            #expect(taken == [try record(run)], "the record of the head's version is handed over")
            #expect(sealedVersions == [walk2.versionID], "a head of another version is read as stored")
            #expect(opened.take(walk1.versionID) != nil && opened.take(stray.versionID) != nil, "what is not a head is never taken")
            #expect(opened.take(run.versionID) == nil, "a record is taken once")
            // Kept up to the capacity, then no more.
            for i in 0..<OpenedRecords.capacity { opened.keep("v\(i)", try record(run)) }
            opened.keep("one more", try record(run))
            #expect(opened.take("one more") == nil && opened.take("v0") != nil)
        }
    }

    @Test func anOlderVersionIsKeptAsideAndTheRestOfThePageIsStored() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let cache = try DoctorCache(url: url)
            try await cache.store(
                [try Self.entry(try sealed.activity("walk", at: 2_000), sequence: 4)],
                release: [],
                owner: owner,
                tresor: sealed.tresor.id,
                cursor: 4
            )
            let replayed = try sealed.activity("walk", at: 1_000)
            let page = [try Self.entry(try sealed.activity("run", at: 3_000), sequence: 5), try Self.entry(replayed, sequence: 6)]
            try await cache.store(page, release: [], owner: owner, tresor: sealed.tresor.id, cursor: 6)
            #expect(try await cache.cursor(owner: owner, tresor: sealed.tresor.id) == 6)
            let live = try await cache.liveEnvelopes(owner: owner, tresor: sealed.tresor.id).map {
                try StoredEnvelope.decode($0)
            }
            #expect(live.count == 2, "the page's new record was stored")
            #expect(live.first { $0.header.recordID == sealed.recordID("walk") }?.header.timestamp == sealed.timestamp(2_000), "the held head stays")
            let held = QuarantinedRecord(sequence: 6, recordID: sealed.recordID("walk").hex, versionID: replayed.versionID, reason: .replayed)
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id) == [held])
            #expect(try await cache.quarantined(owner: UUID(), tresor: sealed.tresor.id).isEmpty, "kept per patient")

            // A newer verified version of that record heals it; a released sequence leaves too.
            try await cache.store(
                [try Self.entry(try sealed.activity("walk", at: 4_000), sequence: 7)],
                release: [],
                owner: owner,
                tresor: sealed.tresor.id,
                cursor: 7
            )
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id).isEmpty)
        }
    }

    /// Each share holds, releases and lists its own quarantined rows, whatever sequence another share's
    /// page names (the server chooses both): a hold, a release and a verified change of one share leave
    /// the rows of another alone.
    @Test func aQuarantinedRowIsHeldAndReleasedByItsShareOnly() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let other = SealedRecords(category: "assessments")
            let cache = try DoctorCache(url: url)
            let held = QuarantinedRecord(sequence: 5, recordID: sealed.recordID("walk").hex, versionID: nil, reason: .invalidSignature)
            try await cache.store([.failed(held)], release: [], owner: owner, tresor: sealed.tresor.id, cursor: 5)

            let moved = QuarantinedRecord(sequence: 5, recordID: held.recordID, versionID: nil, reason: .wrongContext)
            try await cache.store([.failed(moved)], release: [], owner: owner, tresor: other.tresor.id, cursor: 5)
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id) == [held], "not overwritten by another share's row")
            #expect(try await cache.quarantined(owner: owner, tresor: other.tresor.id) == [moved])
            try await cache.store([], release: [5], owner: owner, tresor: other.tresor.id, cursor: nil)
            #expect(try await cache.quarantined(owner: owner, tresor: other.tresor.id).isEmpty)
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id) == [held], "not released by another share")
            // A verified change of the other share at that sequence, even naming the record, releases nothing here.
            try await cache.store(
                [try Self.entry(try other.activity("walk", at: 1_000), sequence: 5)],
                release: [],
                owner: owner,
                tresor: other.tresor.id,
                cursor: 5
            )
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id) == [held])
            try await cache.store([], release: [5], owner: owner, tresor: sealed.tresor.id, cursor: nil)
            #expect(try await cache.quarantined(owner: owner, tresor: sealed.tresor.id).isEmpty, "its own share releases it")
        }
    }
}

extension DoctorCache {
    /// Up to `limit` stored envelopes (binary) of live records of one share, as `liveHeads` reads them.
    func liveEnvelopes(owner: UUID, tresor: UUID, after: String, limit: Int) async throws -> (envelopes: [Data], last: String)? {
        let page: (heads: [LiveHead<Data>], last: String)? = try await liveHeads(owner: owner, tresor: tresor, after: after, limit: limit)
        return page.map { page in
            (
                page.heads.map { head in
                    switch head {
                    case let .sealed(bytes): bytes
                    case let .taken(bytes): bytes
                    }
                }, page.last
            )
        }
    }

    /// Every stored envelope of the live records of one share, read a page at a time as the view reads them.
    func liveEnvelopes(owner: UUID, tresor: UUID) async throws -> [Data] {
        var out: [Data] = []
        var after = ""
        while let page = try await liveEnvelopes(owner: owner, tresor: tresor, after: after, limit: 3) {
            out += page.envelopes
            after = page.last
        }
        return out
    }
}
