import Foundation
import GRDB
import Testing
import VaultCore
import VaultTestSupport

@testable import VaultClient

/// A doctor's first read of a patient written pending parks its envelopes among the heads, where they go
/// once authenticated (Docs/commitment-pages.md §8, DoctorCache+Parked.swift): never shown, never read as
/// heads, and moved back to `pending_records` by anything but the transaction that authenticates them.
/// Every page here is written pending at once (a budget of 0), and parked however small its records.
@Suite("Client: a first read parked among the heads")
struct ParkedReadTests {
    typealias Page = CommitmentPageTests.Page

    /// What the cache holds of a first read: the mark, the rows among the heads, and the rows pending.
    struct Layout: Equatable, CustomStringConvertible {
        var mark: String?
        var heads: Int
        var pending: Int

        static func of(_ cache: DoctorCache, _ owner: UUID) async throws -> Layout {
            try await cache.queue.read { db in
                Layout(
                    mark: try String.fetchOne(db, sql: "SELECT tresor_id FROM parked_reads WHERE owner_id = ?", arguments: [owner.uuidString]),
                    heads: try Int.fetchOne(db, sql: "SELECT count(*) FROM shared_records") ?? -1,
                    pending: try Int.fetchOne(db, sql: "SELECT count(*) FROM pending_records") ?? -1
                )
            }
        }

        var description: String { "mark \(mark ?? "-"), \(heads) heads, \(pending) pending" }
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
            #expect(try await Layout.of(cache, owner) == Layout(mark: nil, heads: 3, pending: 0))
            #expect(try await shownVersions() == all)
        }
    }

    /// A fresh cache and a new patient's sealed records (the patient's id with them), for `body`.
    static func withSealedCache(_ body: (SealedRecords, UUID, DoctorCache) async throws -> Void) async throws {
        try await SealedRecords.withTemporaryFile("cache.sqlite") { url in
            let sealed = SealedRecords()
            try await body(sealed, sealed.identity.userID, try DoctorCache(url: url))
        }
    }

    /// Every page written pending, and parked whatever the size of its records.
    static func parkingEverything<T>(_ body: () async throws -> T) async throws -> T {
        try await HeldPages.$budget.withValue(0) { try await DoctorCache.$parkingEnvelopeBytes.withValue(0) { try await body() } }
    }

    /// The cases of a pull whose earlier pages do not match (a bad signature, an older version, no
    /// commitment, a record twice), parked: each ends as the one-by-one path ends.
    @Test(arguments: Backend.allCases)
    func parkedPagesThatDoNotMatchAreCheckedRecordByRecord(backend: Backend) async throws {
        try await Self.parkingEverything {
            try await CommitmentPullTests().anEarlierPageThatDoesNotMatchIsCheckedRecordByRecord(backend: backend, budget: 0)
        }
    }

    /// Parked, then authenticated by the final commitment: the envelopes stay where they lie, shown only then.
    @Test(arguments: Backend.allCases)
    func aParkedFirstReadIsShownOnlyOnceItsCommitmentVouchesForIt(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await Self.parkingEverything {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                let parked = try await Layout.of(r.cache, r.owner)
                #expect(parked == Layout(mark: r.tresor.uuidString, heads: 2, pending: 0), "\(parked)")
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
            try await Self.parkingEverything {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                let counter = PullSignatures.Counter()
                _ = try await r.pull([Page(changes: [r.f.honest[2]], done: true)], counter: counter)
                #expect(counter.value == 3, "\(counter.value) checks")
                #expect(try await Layout.of(r.cache, r.owner) == Layout(mark: nil, heads: 3, pending: 0))
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
            try await Self.parkingEverything {
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
                #expect(try await Layout.of(r.cache, r.owner) == Layout(mark: nil, heads: 1, pending: 2))
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
            try await Self.parkingEverything {
                let r = try Reader(try await CommitmentPageTests.fixture(world), watching: true)
                try await r.cutPull()
                #expect(try await Layout.of(r.cache, r.owner) == Layout(mark: nil, heads: 0, pending: 2))
            }
        }
    }

    /// A head of the patient under another share while a read is parked (a damaged cache: nothing writes
    /// one there): the final commitment, though it matches every record of the share folded, vouches for
    /// nothing (the patient's heads are not exactly those folded), and moving the read back reports the
    /// damage; nothing is shown.
    @Test(arguments: Backend.allCases)
    func aHeadTheFoldDidNotCoverIsNeverVouchedFor(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await Self.parkingEverything {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                let stray = StoredEnvelope.encode(try #require(r.f.honest[0].envelope))
                try await r.cache.queue.write { db in
                    try db.execute(
                        sql: """
                            INSERT INTO shared_records
                                (owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope, version_id, sequence)
                            VALUES (?, ?, ?, 1, 0, 'device', 0, ?, ?, 99)
                            """,
                        arguments: [
                            r.owner.uuidString, String(repeating: "f", count: 64), UUID().uuidString, stray, String(repeating: "0", count: 64),
                        ]
                    )
                }
                let counter = PullSignatures.Counter()
                await #expect(throws: ClientError.self) {
                    try await r.pull([Page(changes: [r.f.honest[2]], commitments: r.f.commitments)], counter: counter)
                }
                #expect(try await Layout.of(r.cache, r.owner).mark == r.tresor.uuidString, "still parked")
                #expect(try await r.shownVersions().isEmpty)
            }
        }
    }

    /// Pages at sequences parked already (another process of the doctor pulling the same pages, filled
    /// otherwise by the server) are not parked over: the parked read goes pending, and the new pages
    /// replace its rows there, as they always did.
    @Test func pagesAtSequencesHeldPendingAreNotParkedOver() async throws {
        try await Self.parkingEverything { try await Self.pagesAtSequencesParked() }
    }

    static func pagesAtSequencesParked() async throws {
        try await Self.withSealedCache { sealed, owner, cache in
            let first = [try sealed.activity("a1", at: 1_000), try sealed.activity("a2", at: 1_000)]
            let second = [try sealed.activity("b1", at: 1_000), try sealed.activity("b2", at: 1_000)]
            func stage(_ envs: [Envelope]) async throws {
                let pulled = try envs.enumerated().map { try DoctorCacheTests.entry($1, sequence: UInt64($0 + 1)) }
                try await cache.stage(pulled, owner: owner, tresor: sealed.tresor.id, cursor: 2, parking: true)
            }
            try await stage(first)
            #expect(try await Layout.of(cache, owner) == Layout(mark: sealed.tresor.id.uuidString, heads: 2, pending: 0))
            try await stage(second)
            #expect(try await Layout.of(cache, owner) == Layout(mark: nil, heads: 0, pending: 2))
            #expect(try await cache.pending(owner: owner, tresor: sealed.tresor.id, limit: 10).map(\.versionID) == second.map(\.versionID))
        }
    }

    /// A cache that holds a head of the patient parks nothing: a page written pending keeps its envelopes.
    @Test func aCacheThatHoldsThePatientParksNothing() async throws {
        try await Self.parkingEverything { try await Self.aCacheHoldingThePatient() }
    }

    static func aCacheHoldingThePatient() async throws {
        try await Self.withSealedCache { sealed, owner, cache in
            let held = try DoctorCacheTests.entry(try sealed.activity("a1", at: 1_000), sequence: 1)
            try await cache.store([held], release: [], owner: owner, tresor: sealed.tresor.id, cursor: 1)
            let next = try DoctorCacheTests.entry(try sealed.activity("a2", at: 1_000), sequence: 2)
            try await cache.stage([next], owner: owner, tresor: sealed.tresor.id, cursor: 2, parking: true)
            #expect(try await Layout.of(cache, owner) == Layout(mark: nil, heads: 1, pending: 1))
        }
    }

    /// A parked record that lost its sequence (a damaged cache) is reported as damage, not read, and
    /// reading what is pending does not crash.
    @Test func aParkedRecordWithoutItsSequenceIsReportedAsDamage() async throws {
        try await Self.parkingEverything { try await Self.aDamagedParkedRecord() }
    }

    static func aDamagedParkedRecord() async throws {
        try await Self.withSealedCache { sealed, owner, cache in
            let env = try sealed.activity("a1", at: 1_000)
            try await cache.stage([try DoctorCacheTests.entry(env, sequence: 1)], owner: owner, tresor: sealed.tresor.id, cursor: 1, parking: true)
            try await cache.queue.write { db in try db.execute(sql: "UPDATE shared_records SET sequence = NULL") }
            await #expect(throws: ClientError.self) { try await cache.pending(owner: owner, tresor: sealed.tresor.id, limit: 10) }
            await #expect(throws: ClientError.self) { try await cache.unpark(owner: owner) }
            #expect(try await Layout.of(cache, owner).mark == sealed.tresor.id.uuidString, "nothing moved")
        }
    }

    /// With the default threshold, a first read of small records is written pending as it was: parked,
    /// each costs an index insert at every page's commit, more than the copy it saves.
    @Test(arguments: Backend.allCases)
    func aFirstReadOfSmallRecordsIsNotParked(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await HeldPages.$budget.withValue(0) {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                #expect(try await Layout.of(r.cache, r.owner) == Layout(mark: nil, heads: 0, pending: 2))
                try await r.finishVouched()
            }
        }
    }

    /// A first read that began pending (a watch's page, or small records) is not parked later: parked
    /// records and records pending of one read would be folded apart.
    @Test func aReadThatBeganPendingIsNotParkedLater() async throws {
        try await Self.parkingEverything {
            try await Self.withSealedCache { sealed, owner, cache in
                let first = try DoctorCacheTests.entry(try sealed.activity("a1", at: 1_000), sequence: 1)
                try await cache.stage([first], owner: owner, tresor: sealed.tresor.id, cursor: 1)
                let next = try DoctorCacheTests.entry(try sealed.activity("a2", at: 1_000), sequence: 2)
                try await cache.stage([next], owner: owner, tresor: sealed.tresor.id, cursor: 2, parking: true)
                #expect(try await Layout.of(cache, owner) == Layout(mark: nil, heads: 0, pending: 2))
            }
        }
    }

    /// A head of another share of the patient stored while a read is parked moves the parked read pending
    /// first: the other share's head is shown, the parked records are not, and none is lost.
    @Test func anotherSharesHeadMovesAParkedReadPending() async throws {
        try await Self.parkingEverything {
            try await Self.withSealedCache { sealed, owner, cache in
                let parked = try [("a1", 1), ("a2", 2)].map {
                    try DoctorCacheTests.entry(try sealed.activity($0.0, at: 1_000), sequence: UInt64($0.1))
                }
                try await cache.stage(parked, owner: owner, tresor: sealed.tresor.id, cursor: 2, parking: true)
                #expect(try await Layout.of(cache, owner).mark == sealed.tresor.id.uuidString)
                let other = SealedRecords(identity: sealed.identity, category: "assessments")
                let head = try DoctorCacheTests.entry(try other.activity("b1", at: 1_000), sequence: 7)
                try await cache.store([head], release: [], owner: owner, tresor: other.tresor.id, cursor: 7)
                #expect(try await Layout.of(cache, owner) == Layout(mark: nil, heads: 1, pending: 2))
                #expect(try await cache.liveEnvelopes(owner: owner, tresor: other.tresor.id).count == 1)
                #expect(try await cache.liveEnvelopes(owner: owner, tresor: sealed.tresor.id).isEmpty)
                #expect(try await cache.pending(owner: owner, tresor: sealed.tresor.id, limit: 10).count == 2)
            }
        }
    }

    /// The set kept with a parked read (summed on every core as its pages were checked, or element by
    /// element when a page came without its sum) is the set the parked records fold to one at a time: the
    /// authenticating transaction takes it instead of reading them again.
    @Test(arguments: Backend.allCases)
    func theParkedSetIsTheFoldOfTheParkedRecords(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            try await Self.parkingEverything {
                let r = try Reader(try await CommitmentPageTests.fixture(world))
                try await r.cutPull()
                try await r.cache.queue.read { db in
                    let kept = try #require(try DoctorCache.parkedSet(db, owner: r.owner.uuidString))
                    var folded = HeadSet()
                    try DoctorCache.eachPending(db, owner: r.owner.uuidString, tresor: r.tresor.uuidString, envelopes: false) { head in
                        try folded.replace(recordID: head.recordID, old: nil, with: head.head)
                    }
                    #expect(kept == folded && kept.live == 2)
                }
            }
            // Without sums: each element added as it is parked.
            try await Self.parkingEverything {
                try await Self.withSealedCache { sealed, owner, cache in
                    let envs = [try sealed.activity("a1", at: 1_000), try sealed.activity("a2", at: 2_000, deleted: true)]
                    let pulled = try envs.enumerated().map { try DoctorCacheTests.entry($1, sequence: UInt64($0 + 1)) }
                    try await cache.stage(Array(pulled.prefix(1)), owner: owner, tresor: sealed.tresor.id, cursor: 1, parking: true)
                    try await cache.stage(Array(pulled.suffix(1)), owner: owner, tresor: sealed.tresor.id, cursor: 2, parking: true)
                    var folded = HeadSet()
                    for env in envs {
                        let head = HeadSet.Head(versionID: env.versionID, deleted: env.header.deleted, timestamp: env.header.timestamp)
                        try folded.replace(recordID: env.header.recordID.hex, old: nil, with: head)
                    }
                    let kept = try await cache.queue.read { db in try DoctorCache.parkedSet(db, owner: owner.uuidString) }
                    #expect(kept == folded && folded.live == 1 && folded.deleted == 1)
                }
            }
        }
    }
}
