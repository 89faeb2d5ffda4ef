import Foundation
import Testing
import VaultCore

@testable import VaultClient

@Suite("Client: the doctor's cache")
struct DoctorCacheTests {
    static func entry(_ env: Envelope) throws -> DoctorCache.Entry {
        DoctorCache.Entry(header: env.header, json: try LocalStore.encoder.encode(env))
    }

    static let acceptAll: @Sendable (RecordHeader, HLCTimestamp?) throws -> Void = { _, _ in }

    @Test func aCursorPerShareSurvivesReopening() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let interventions = SealedRecords()
            let owner = interventions.identity.userID
            let assessments = Tresor.create(ownerID: owner, category: "assessments")
            let cache = try DoctorCache(url: url)
            #expect(try await cache.cursor(owner: owner, tresor: interventions.tresor.id) == 0)
            try await cache.store(
                [try Self.entry(try interventions.activity("walk", at: 1_000))],
                owner: owner,
                tresor: interventions.tresor.id,
                cursor: 7,
                check: Self.acceptAll
            )
            try await cache.store([], owner: owner, tresor: assessments.id, cursor: 3, check: Self.acceptAll)

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
            try await cache.store(
                [try Self.entry(v1), try Self.entry(try sealed.activity("run", at: 1_000))],
                owner: owner,
                tresor: sealed.tresor.id,
                cursor: 2,
                check: Self.acceptAll
            )
            let seen = HeldHeads()
            try await cache.store(
                [try Self.entry(try sealed.activity("walk", at: 2_000, deleted: true))],
                owner: owner,
                tresor: sealed.tresor.id,
                cursor: 3
            ) { header, held in seen.append(header.timestamp, held) }
            #expect(seen.pairs == [Pair(new: sealed.timestamp(2_000), held: sealed.timestamp(1_000))], "the check sees the held head")
            let live = try await cache.liveEnvelopes(owner: owner, tresor: sealed.tresor.id)
            #expect(try live.map { try LocalStore.decoder.decode(Envelope.self, from: $0).header.recordID } == [sealed.recordID("run")])
        }
    }

    @Test func aRefusedPageStoresNothingAndKeepsTheCursor() async throws {
        try await SealedRecords.withTemporaryFile("store.sqlite") { url in
            let sealed = SealedRecords()
            let owner = sealed.identity.userID
            let cache = try DoctorCache(url: url)
            try await cache.store(
                [try Self.entry(try sealed.activity("walk", at: 2_000))],
                owner: owner,
                tresor: sealed.tresor.id,
                cursor: 4,
                check: Self.acceptAll
            )
            let page = [try Self.entry(try sealed.activity("run", at: 3_000)), try Self.entry(try sealed.activity("walk", at: 1_000))]
            await #expect(throws: Refused.self) {
                try await cache.store(page, owner: owner, tresor: sealed.tresor.id, cursor: 6) { header, held in
                    if let held, header.timestamp < held { throw Refused() }
                }
            }
            #expect(try await cache.cursor(owner: owner, tresor: sealed.tresor.id) == 4)
            #expect(try await cache.liveEnvelopes(owner: owner, tresor: sealed.tresor.id).count == 1, "the page's new record was not stored")
        }
    }
}

struct Pair: Equatable {
    var new: HLCTimestamp
    var held: HLCTimestamp?
}

/// What a cache's check was shown, collected from its (Sendable) closure.
final class HeldHeads: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [Pair] = []

    func append(_ new: HLCTimestamp, _ held: HLCTimestamp?) {
        lock.withLock { seen.append(Pair(new: new, held: held)) }
    }

    var pairs: [Pair] { lock.withLock { seen } }
}
