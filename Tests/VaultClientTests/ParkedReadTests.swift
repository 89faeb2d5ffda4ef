import Foundation
import GRDB
import Testing
import VaultCore
import VaultTestSupport

@testable import VaultClient

/// A doctor's first read of a patient written pending parks its envelopes among the heads, where they go
/// once authenticated (Docs/commitment-pages.md §8, DoctorCache+Parked.swift): never shown, never read as
/// heads, and moved back to `pending_records` by anything but the transaction that authenticates them.
/// Every page here is written pending at once (a budget of 0).
@Suite("Client: a first read parked among the heads")
struct ParkedReadTests {
    typealias Page = CommitmentPageTests.Page

    /// What the cache holds of a first read: the mark, the rows among the heads, the pending rows whose
    /// envelope is parked (empty) and those that carry theirs.
    struct Layout: Equatable, CustomStringConvertible {
        var mark: String?
        var heads: Int
        var parkedPending: Int
        var pending: Int

        static func of(_ cache: DoctorCache, _ owner: UUID) async throws -> Layout {
            try await cache.queue.read { db in
                Layout(
                    mark: try String.fetchOne(db, sql: "SELECT tresor_id FROM parked_reads WHERE owner_id = ?", arguments: [owner.uuidString]),
                    heads: try Int.fetchOne(db, sql: "SELECT count(*) FROM shared_records") ?? -1,
                    parkedPending: try Int.fetchOne(db, sql: "SELECT count(*) FROM pending_records WHERE length(envelope) = 0") ?? -1,
                    pending: try Int.fetchOne(db, sql: "SELECT count(*) FROM pending_records WHERE length(envelope) > 0") ?? -1
                )
            }
        }

        var description: String { "mark \(mark ?? "-"), \(heads) heads, \(parkedPending) parked pending, \(pending) pending" }
    }

    struct Reader {
        let f: CommitmentPageTests.Fixture
        let cache: DoctorCache
        let applier: SharedReplica
        var owner: UUID { f.patient.userID }
        var tresor: UUID { f.share.tresor.id }

        init(_ f: CommitmentPageTests.Fixture, watching: Bool = false) throws {
            self.f = f
            cache = try DoctorCache(url: f.world.root.appendingPathComponent("cache-\(UUID().uuidString).sqlite"))
            let told: (@Sendable ([DoctorCache.Entry]) async throws -> Void)? = watching ? { @Sendable _ in } : nil
            applier = SharedReplica(cache: cache, patient: f.patient, share: f.share, applied: told)
        }

        func pull(_ pages: [Page], counter: PullSignatures.Counter) async throws -> ReplicaPull {
            let feed = ReplicaFeed(owner: owner, tresor: tresor)
            return try await PullSignatures.$counter.withValue(counter) { try await CommitmentPageTests.engine(feed, applier, pages).pull() }
        }

        /// Two pages of the fixture's first two records, then a server that stops without its final page.
        func cutPull() async throws {
            let cut = [Page(changes: [f.honest[0]], done: false), Page(changes: [f.honest[1]], done: false), Page(changes: [], done: false)]
            await #expect(throws: ClientError.self) { try await pull(cut, counter: PullSignatures.Counter()) }
        }

        func shownVersions() async throws -> Set<String> {
            guard let shown = try await cache.liveEnvelopes(owner: owner, tresor: tresor, after: "", limit: 10) else { return [] }
            return Set(try shown.envelopes.map { try StoredEnvelope.decode($0).versionID })
        }

        var all: Set<String> { Set(f.honest.map { $0.envelope!.versionID }) }

        /// The final page, the third record with the commitments: every record stored without a signature
        /// check, nothing left pending or parked, all shown.
        func finishVouched() async throws {
            let counter = PullSignatures.Counter()
            let pulled = try await pull([Page(changes: [f.honest[2]], commitments: f.commitments)], counter: counter)
            #expect(pulled.problems.isEmpty && counter.value == 0, "\(pulled.problems); \(counter.value) checks")
            #expect(try await Layout.of(cache, owner) == Layout(mark: nil, heads: 3, parkedPending: 0, pending: 0))
            #expect(try await shownVersions() == all)
        }
    }

    /// Parked, then authenticated by the final commitment: the envelopes stay where they lie, shown only then.
    @Test(arguments: Backend.allCases)
    func aParkedFirstReadIsShownOnlyOnceItsCommitmentVouchesForIt(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await HeldPages.$budget.withValue(0) {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                let parked = try await Layout.of(r.cache, r.owner)
                #expect(parked == Layout(mark: r.tresor.uuidString, heads: 2, parkedPending: 2, pending: 0), "\(parked)")
                #expect(try await r.shownVersions().isEmpty, "nothing parked is shown")
                // What is held pending reads the same, parked or not.
                let pending = try await r.cache.pending(owner: r.owner, tresor: r.tresor, limit: 10)
                #expect(pending.map(\.versionID) == r.f.honest.prefix(2).map { $0.envelope!.versionID })
                #expect(try pending.allSatisfy { try StoredEnvelope.decode($0.bytes).versionID == $0.versionID })

                try await r.finishVouched()
            }
        }
    }

    /// Parked, and the final page shows no commitment: the parked records go back pending and each is
    /// checked on its own; nothing is lost and nothing stays parked.
    @Test(arguments: Backend.allCases)
    func aParkedFirstReadWithoutItsCommitmentIsCheckedRecordByRecord(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await HeldPages.$budget.withValue(0) {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                let counter = PullSignatures.Counter()
                _ = try await r.pull([Page(changes: [r.f.honest[2]], done: true)], counter: counter)
                #expect(counter.value == 3, "\(counter.value) checks")
                #expect(try await Layout.of(r.cache, r.owner) == Layout(mark: nil, heads: 3, parkedPending: 0, pending: 0))
                #expect(try await r.shownVersions() == r.all)
            }
        }
    }

    /// A head written by another way while a first read is parked (a checked page: a quarantine retry, a
    /// page of an event) first moves the parked records back pending, envelopes and all: no parked
    /// envelope is read as a head, and the next final page authenticates the rest.
    @Test(arguments: Backend.allCases)
    func anotherWriterOfHeadsMovesAParkedReadBackPending(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await HeldPages.$budget.withValue(0) {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                let env = try #require(r.f.honest[2].envelope)
                let entry = DoctorCache.Entry(
                    sequence: r.f.honest[2].sequence,
                    header: env.header,
                    versionID: env.versionID,
                    bytes: StoredEnvelope.encode(env)
                )
                try await r.cache.store([.verified(entry)], release: [], owner: r.owner, tresor: r.tresor, cursor: nil)
                #expect(try await Layout.of(r.cache, r.owner) == Layout(mark: nil, heads: 1, parkedPending: 0, pending: 2))
                #expect(try await r.shownVersions() == [env.versionID])
                let pending = try await r.cache.pending(owner: r.owner, tresor: r.tresor, limit: 10)
                #expect(try pending.map { try StoredEnvelope.decode($0.bytes).versionID } == r.f.honest.prefix(2).map { $0.envelope!.versionID })

                // The final page (the stored record again, as the server sends it) authenticates all three.
                try await r.finishVouched()
            }
        }
    }

    /// A doctor's `watch` is told of each record stored: its first read is written pending as it was,
    /// envelopes and all, not parked.
    @Test(arguments: Backend.allCases)
    func aWatchedFirstReadIsNotParked(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await HeldPages.$budget.withValue(0) {
                let r = try Reader(try await CommitmentPageTests.fixture(world), watching: true)
                try await r.cutPull()
                #expect(try await Layout.of(r.cache, r.owner) == Layout(mark: nil, heads: 0, parkedPending: 0, pending: 2))
            }
        }
    }
}
