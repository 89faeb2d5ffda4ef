import Foundation
import Testing
import VaultCore
import VaultTestSupport

@testable import VaultClient

/// A doctor's pull of several pages authenticated by its final commitment (Docs/commitment-pages.md §8):
/// the pages before the final one are held pending, never shown, until the final page's commitment
/// authenticates all of them at once, or sends them to the per-record check, which then names exactly the
/// records that fail, as the old path does. Each test runs with the pages held in memory (the default
/// budget) and with every page written pending (a budget of 0).
@Suite("Client: a pull of several pages authenticated by its final commitment")
struct CommitmentPullTests {
    typealias Page = CommitmentPageTests.Page

    /// In memory within the default budget, and written pending at once.
    static let budgets = [HeldPages.budget, 0]

    /// `changes` split into pages of one change each, the last one final with `commitments`, and an empty
    /// final page after them when `emptyLast`.
    static func split(_ changes: [PulledChange], _ commitments: [StateCommitment], emptyLast: Bool = false) -> [Page] {
        var pages = changes.map { Page(changes: [$0], done: false) }
        if emptyLast {
            pages.append(Page(changes: [], commitments: commitments))
        } else {
            pages[pages.count - 1].done = true
            pages[pages.count - 1].commitments = commitments
        }
        return pages
    }

    @Test(arguments: Backend.allCases, budgets)
    func everyPageOfAPullIsAuthenticatedByItsFinalCommitment(backend: Backend, budget: Int) async throws {
        try await ClientWorld.run(backend) { world in
            try await HeldPages.$budget.withValue(budget) {
                let f = try await CommitmentPageTests.fixture(world)
                let all = Dictionary(uniqueKeysWithValues: f.honest.map { ($0.recordID!, $0.envelope!.versionID) })
                for emptyLast in [false, true] {
                    let pages = Self.split(f.honest, f.commitments, emptyLast: emptyLast)
                    let counter = PullSignatures.Counter()
                    let fast = try await CommitmentPageTests.doctorReads(f, [pages], perRecordOnly: false, counter: counter)
                    #expect(counter.value == 0, "no record of any page had its signature checked (empty last page: \(emptyLast))")
                    #expect(fast.kept == all && fast.quarantined.isEmpty && fast.problems == [[]] && fast.errors.isEmpty)
                    #expect(fast == (try await CommitmentPageTests.doctorReads(f, [pages], perRecordOnly: true)))
                }
            }
        }
    }

    @Test(arguments: Backend.allCases, budgets)
    func anEarlierPageThatDoesNotMatchIsCheckedRecordByRecord(backend: Backend, budget: Int) async throws {
        try await ClientWorld.run(backend) { world in
            try await HeldPages.$budget.withValue(budget) {
                let f = try await CommitmentPageTests.fixture(world)
                let rid = f.oldRun.header.recordID
                let cases: [(name: String, pages: [Page], held: [String: QuarantineReason], checks: Int)] = [
                    // A bad signature in the first page: the commitment no longer matches, and each of the three is checked.
                    (
                        "a bad signature early",
                        Self.split(CommitmentPageTests.swap(f.honest, rid, by: try CommitmentPageTests.badSignature(f.run)), f.commitments),
                        [rid.hex: .invalidSignature], 3
                    ),
                    // An older, validly signed version of a record in an earlier page: nothing is held aside, the
                    // mismatch is reported, and every record was checked.
                    ("an older version early", Self.split(CommitmentPageTests.swap(f.honest, rid, by: f.oldRun), f.commitments), [:], 3),
                    // No commitment at the end: the records held pending are checked one by one.
                    ("no commitment", Self.split(f.honest, []), [:], 3),
                    // Two versions of one record across pages: the earlier would not be a head, so nothing is vouched for.
                    ("a record twice", Self.split(try CommitmentPageTests.forgedBeforeRun(f), f.commitments), [:], 4),
                ]
                for c in cases {
                    let counter = PullSignatures.Counter()
                    let fast = try await CommitmentPageTests.doctorReads(f, [c.pages], perRecordOnly: false, counter: counter)
                    let slow = try await CommitmentPageTests.doctorReads(f, [c.pages], perRecordOnly: true)
                    #expect(fast == slow, "\(c.name): \(fast) against \(slow)")
                    #expect(Dictionary(uniqueKeysWithValues: fast.quarantined.map { ($0.recordID!, $0.reason) }) == c.held, "\(c.name)")
                    let others = f.honest.compactMap(\.envelope).filter { $0.header.recordID != rid }
                    #expect(others.allSatisfy { fast.kept[$0.header.recordID.hex] == $0.versionID }, "\(c.name): nothing else is lost")
                    #expect(counter.value == c.checks, "\(c.name): \(counter.value) checks")
                }
            }
        }
    }

    /// Budgets that write the first two pages pending: 0 (each page at once), and the first envelope's
    /// size (the first page held in memory, written with the second once the second passes the budget).
    @Test(arguments: Backend.allCases, [false, true])
    func pagesOfAnUnfinishedPullAreNeitherShownNorLost(backend: Backend, heldFirst: Bool) async throws {
        try await ClientWorld.run(backend) { world in
            let f = try await CommitmentPageTests.fixture(world)
            let budget = heldFirst ? StoredEnvelope.encode(f.honest[0].envelope!).count : 0
            try await HeldPages.$budget.withValue(budget) { try await Self.anUnfinishedPullIsWrittenPending(f) }
        }
    }

    static func anUnfinishedPullIsWrittenPending(_ f: CommitmentPageTests.Fixture) async throws {
        let world = f.world
        let cache = try DoctorCache(url: world.root.appendingPathComponent("cache-\(UUID().uuidString).sqlite"))
        let applier = SharedReplica(cache: cache, patient: f.patient, share: f.share)
        let feed = ReplicaFeed(owner: f.patient.userID, tresor: f.share.tresor.id)
        let owner = f.patient.userID
        let tresor = f.share.tresor.id
        // Two pages, then a server that stops without saying it sent everything.
        let cut = [Page(changes: [f.honest[0]], done: false), Page(changes: [f.honest[1]], done: false), Page(changes: [], done: false)]
        let counter = PullSignatures.Counter()
        await #expect(throws: ClientError.self) {
            try await PullSignatures.$counter.withValue(counter) { try await CommitmentPageTests.engine(feed, applier, cut).pull() }
        }
        #expect(try await cache.liveEnvelopes(owner: owner, tresor: tresor, after: "", limit: 10) == nil, "nothing unauthenticated is shown")
        #expect(try await cache.pending(owner: owner, tresor: tresor, limit: 10).map(\.sequence) == [f.honest[0].sequence, f.honest[1].sequence])
        #expect(try await cache.cursor(owner: owner, tresor: tresor) == f.honest[1].sequence, "the pull goes on from where it stopped")

        // The next pull goes on from the cursor; its final commitment authenticates the pages held pending too.
        let rest = [Page(changes: [f.honest[2]], commitments: f.commitments)]
        let pulled = try await PullSignatures.$counter.withValue(counter) { try await CommitmentPageTests.engine(feed, applier, rest).pull() }
        #expect(pulled.problems.isEmpty && counter.value == 0)
        #expect(try await cache.pending(owner: owner, tresor: tresor, limit: 10).isEmpty)
        let shown = try #require(try await cache.liveEnvelopes(owner: owner, tresor: tresor, after: "", limit: 10))
        #expect(Set(try shown.envelopes.map { try StoredEnvelope.decode($0).versionID }) == Set(f.honest.map { $0.envelope!.versionID }))
    }

    /// Within the budget an unfinished pull writes nothing and keeps its cursor: its pages come again with
    /// the next pull, which must not find them twice (what the cut pull held in memory is gone).
    @Test(arguments: Backend.allCases)
    func pagesHeldInMemoryByAnUnfinishedPullAreFetchedAgain(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let f = try await CommitmentPageTests.fixture(world)
            let cache = try DoctorCache(url: world.root.appendingPathComponent("cache-\(UUID().uuidString).sqlite"))
            let applier = SharedReplica(cache: cache, patient: f.patient, share: f.share)
            let feed = ReplicaFeed(owner: f.patient.userID, tresor: f.share.tresor.id)
            let owner = f.patient.userID
            let tresor = f.share.tresor.id
            let first = [Page(changes: [f.honest[0]], done: false), Page(changes: [f.honest[1]], done: false)]
            let counter = PullSignatures.Counter()
            await #expect(throws: ClientError.self) {
                try await PullSignatures.$counter.withValue(counter) {
                    try await CommitmentPageTests.engine(feed, applier, first + [Page(changes: [], done: false)]).pull()
                }
            }
            #expect(try await cache.liveEnvelopes(owner: owner, tresor: tresor, after: "", limit: 10) == nil, "nothing unauthenticated is shown")
            #expect(try await cache.pending(owner: owner, tresor: tresor, limit: 10).isEmpty, "nothing was written pending")
            #expect(try await cache.cursor(owner: owner, tresor: tresor) == 0, "the cursor did not move past pages never written")

            // The same applier, as a watch keeps one: the pages come again, and nothing of the cut pull is counted twice.
            let again = first + [Page(changes: [f.honest[2]], commitments: f.commitments)]
            let pulled = try await PullSignatures.$counter.withValue(counter) { try await CommitmentPageTests.engine(feed, applier, again).pull() }
            #expect(pulled.problems.isEmpty && counter.value == 0, "\(pulled.problems); \(counter.value) checks")
            #expect(try await cache.cursor(owner: owner, tresor: tresor) == f.honest[2].sequence)
            let shown = try #require(try await cache.liveEnvelopes(owner: owner, tresor: tresor, after: "", limit: 10))
            #expect(Set(try shown.envelopes.map { try StoredEnvelope.decode($0).versionID }) == Set(f.honest.map { $0.envelope!.versionID }))
        }
    }

    /// The sum of the head elements worked out on every core as each page is checked (`SharedPage.added`,
    /// kept for the pages held in memory) stands in for folding each head in the store's transaction, where
    /// each record's old head is still read and removed. Over a cache that already holds the share, a second
    /// pull replaces one head and sends the other two again as they are (each replaces itself): it is
    /// authenticated without a signature check, and ends exactly where the one-by-one path ends, in pages
    /// of one change (held in memory, then final) and as one final page.
    @Test(arguments: Backend.allCases)
    func headsSummedBeforehandOverACacheThatHoldsTheShare(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let f = try await CommitmentPageTests.fixture(world)
            let rid = f.oldRun.header.recordID
            let before = CommitmentPageTests.swap(f.honest, rid, by: f.oldRun)
            for split in [true, false] {
                let pulls =
                    split
                    ? [Self.split(before, f.staleCommitments), Self.split(f.honest, f.commitments)]
                    : [[Page(changes: before, commitments: f.staleCommitments)], [Page(changes: f.honest, commitments: f.commitments)]]
                let counter = PullSignatures.Counter()
                let fast = try await CommitmentPageTests.doctorReads(f, pulls, perRecordOnly: false, counter: counter)
                let slow = try await CommitmentPageTests.doctorReads(f, pulls, perRecordOnly: true)
                #expect(counter.value == 0, "pages of one change: \(split); \(counter.value) checks")
                #expect(fast == slow && fast.problems == [[], []] && fast.quarantined.isEmpty, "\(fast) against \(slow)")
                #expect(fast.kept == Dictionary(uniqueKeysWithValues: f.honest.map { ($0.recordID!, $0.envelope!.versionID) }))
            }
            // The sum a page carries is that of its own records.
            let applier = SharedReplica(
                cache: try DoctorCache(url: world.root.appendingPathComponent("cache-\(UUID().uuidString).sqlite")),
                patient: f.patient,
                share: f.share
            )
            let heads = f.honest.map { ($0.envelope!.header.recordID.hex, $0.envelope!.versionID) }
            #expect(try await applier.verify(f.honest, commitments: f.commitments).added == (try await LtHash.sum(ofHeads: heads)))
            #expect(try await applier.verifyAhead(Array(f.honest.prefix(2))).added == (try await LtHash.sum(ofHeads: Array(heads.prefix(2)))))
        }
    }
}
