import Foundation
import NIOConcurrencyHelpers
import Testing
import VaultCore
import VaultCrypto

@testable import VaultClient

/// A replica that keeps what the engine asks of it in memory: which pages it stored, with which cursor,
/// releases and commitments. It verifies nothing; the engine's order of work is what is tested here.
actor RecordingReplica: ReplicaApplier {
    struct Stored: Equatable {
        var sequences: [UInt64]
        var release: [UInt64]
        var cursor: UInt64?
        var commitments: Int?
    }

    var storedCursor: UInt64 = 0
    var held: [QuarantinedRecord] = []
    var stores: [Stored] = []
    /// A store of a page holding this sequence fails (a cache that cannot store it).
    var failing: UInt64?
    /// What the reviews of final pages find, one after the other, instead of "checked N".
    var verdicts: [ReplicaStored] = []

    func script(_ verdicts: [ReplicaStored]) { self.verdicts = verdicts }

    init(cursor: UInt64 = 0, held: [UInt64] = [], failing: UInt64? = nil) {
        storedCursor = cursor
        self.held = held.map { QuarantinedRecord(sequence: $0, recordID: nil, versionID: nil, reason: .invalidSignature) }
        self.failing = failing
    }

    func cursor() -> UInt64 { storedCursor }
    func quarantined() -> [QuarantinedRecord] { held }
    func verify(_ changes: [PulledChange]) -> [PulledChange] { changes }

    func store(_ verified: [PulledChange], release: [UInt64], cursor: UInt64?, commitments: [StateCommitment]?) throws -> ReplicaStored {
        let sequences = verified.map(\.sequence)
        if let failing, sequences.contains(failing) { throw ClientError.localState("this page cannot be stored") }
        stores.append(Stored(sequences: sequences, release: release, cursor: cursor, commitments: commitments?.count))
        if let cursor { storedCursor = cursor }
        held.removeAll { release.contains($0.sequence) || sequences.contains($0.sequence) }
        if commitments != nil, !verdicts.isEmpty {
            var verdict = verdicts.removeFirst()
            verdict.resolved = sequences.count
            return verdict
        }
        return ReplicaStored(resolved: sequences.count, problems: commitments.map { ["checked \($0.count)"] } ?? [])
    }
}

/// A server of `sequences` in pages of `limit` changes that counts the pages it served. `stall` makes
/// every page after that sequence an empty one that does not say it is the last.
final class PagedFeed: Sendable {
    let sequences: [UInt64]
    let limit: Int
    let stall: UInt64?
    let served = NIOLockedValueBox<[UInt64]>([])

    init(_ sequences: [UInt64], limit: Int = 2, stall: UInt64? = nil) {
        self.sequences = sequences
        self.limit = limit
        self.stall = stall
    }

    func page(after since: UInt64) -> (page: PulledPage, commitments: [StateCommitment]) {
        served.withLockedValue { $0.append(since) }
        if let stall, since >= stall { return (PulledPage(changes: [], nextCursor: since, done: false), []) }
        let rest = sequences.filter { $0 > since }
        let changes = rest.prefix(limit).map { PulledChange(sequence: $0, undecodable: nil) }
        let done = rest.count <= limit
        return (PulledPage(changes: Array(changes), nextCursor: changes.last?.sequence ?? since, done: done), [])
    }

    func engine(_ replica: RecordingReplica) -> ReplicaEngine<RecordingReplica> {
        ReplicaEngine(feed: ReplicaFeed(owner: UUID()), applier: replica) { _, after in self.page(after: after) }
    }
}

@Suite("Client: the replica engine both readers pull through")
struct ReplicaEngineTests {
    @Test func pagesAreStoredInOrderWithTheirCursorAndOnlyTheLastCarriesCommitments() async throws {
        let feed = PagedFeed([1, 2, 3, 5, 8])
        let replica = RecordingReplica()
        let pulled = try await feed.engine(replica).pull()
        #expect(pulled.pulled == 5 && pulled.resolved == 5)
        #expect(pulled.problems == ["checked 0"], "the final page's commitments were checked, even none")
        #expect(
            await replica.stores == [
                .init(sequences: [1, 2], release: [], cursor: 2, commitments: nil),
                .init(sequences: [3, 5], release: [], cursor: 5, commitments: nil),
                .init(sequences: [8], release: [], cursor: 8, commitments: 0),
            ]
        )
        #expect(feed.served.withLockedValue { $0 } == [0, 2, 5])
        // Nothing new: one empty final page, its commitments checked. Its check reports a problem and no
        // tresor behind, so the feed is pulled once more from the start (changes a healed server holds can
        // sit below the cursor, Docs/design.md §5.2), and that pull's findings are reported.
        let again = try await feed.engine(replica).pull()
        #expect(again.pulled == 5 && again.problems == ["checked 0"])
        #expect(feed.served.withLockedValue { $0 } == [0, 2, 5, 8, 0, 2, 5])
        #expect(await replica.storedCursor == 8)
    }

    /// A server that shows a forged commitment, and then, on the pull from the start that follows, none at
    /// all (so the reader's view would stand, Docs/design.md §5.2): what the first pull caught is kept.
    @Test func whatTheFirstPullCaughtIsKeptWhenThePullFromTheStartFindsTheServerBehind() async throws {
        let patient = Identity.generate()
        let tresor = UUID()
        let seen = StateCommitment.make(
            patient: patient,
            tresorID: tresor,
            category: "interventions",
            sequence: 7,
            state: HeadSet(),
            topEpoch: 1,
            tresorVersion: 1,
            committedAt: 5
        )
        let behind = try #require(ServerBehind(tresorID: tresor, category: "interventions", shown: nil, seen: seen))
        let feed = PagedFeed([1, 2, 3])
        let replica = RecordingReplica(cursor: 3)
        await replica.script([
            ReplicaStored(problems: ["the state commitment of interventions does not verify"]),
            ReplicaStored(problems: [behind.message], behind: [behind]),
        ])
        let pulled = try await feed.engine(replica).pull()
        #expect(pulled.behind == [behind])
        #expect(pulled.problems == ["the state commitment of interventions does not verify", behind.message])
        #expect(feed.served.withLockedValue { $0 } == [3, 0, 2], "pulled once more from the start")
    }

    @Test func anEmptyPageThatDoesNotSayDoneIsAnIntegrityFailure() async throws {
        let feed = PagedFeed([1, 2, 3, 4, 5], stall: 2)
        let replica = RecordingReplica()
        await #expect(throws: ClientError.integrity("the server stopped sending changes without saying it sent them all")) {
            _ = try await feed.engine(replica).pull()
        }
        #expect(await replica.stores.allSatisfy { $0.commitments == nil }, "no commitment was checked")
        #expect(await replica.storedCursor == 2)
    }

    @Test func aStoreThatFailsStopsThePullAtTheNextPage() async throws {
        let feed = PagedFeed(Array(1...40), limit: 1)
        let replica = RecordingReplica(failing: 1)
        await #expect(throws: ClientError.self) { _ = try await feed.engine(replica).pull() }
        #expect(feed.served.withLockedValue { $0.count } <= 3, "the pull went on fetching after a store failed")
        #expect(await replica.storedCursor == 0)
    }

    @Test func quarantinedSequencesAreFetchedAgainAndThoseWithoutAChangeReleased() async throws {
        // Sequences 2 and 6 were quarantined; 6 holds no change any more (its record moved on), 9 is past the cursor.
        let feed = PagedFeed([1, 2, 3, 4, 5, 7, 8])
        let replica = RecordingReplica(cursor: 8, held: [2, 6, 9])
        #expect(try await feed.engine(replica).retryQuarantined() == 1)
        #expect(await replica.stores == [.init(sequences: [2], release: [6], cursor: nil, commitments: nil)])
        #expect(await replica.held.map(\.sequence) == [9])
        #expect(feed.served.withLockedValue { $0 } == [1, 5])
        // Nothing held: nothing fetched.
        let quiet = RecordingReplica(cursor: 8)
        #expect(try await feed.engine(quiet).retryQuarantined() == 0)
        #expect(feed.served.withLockedValue { $0.count } == 2)
    }

    @Test func aPageThatArrivesOtherwiseIsStoredWithItsCursor() async throws {
        let replica = RecordingReplica(cursor: 4)
        let engine = PagedFeed([]).engine(replica)
        let page = PulledPage(changes: [5, 6].map { PulledChange(sequence: $0, undecodable: nil) }, nextCursor: 6, done: false)
        #expect(try await engine.receive(page, commitments: nil).resolved == 2)
        _ = try await engine.receive(PulledPage(changes: [], nextCursor: 9, done: true), commitments: [])
        #expect(
            await replica.stores == [
                .init(sequences: [5, 6], release: [], cursor: 6, commitments: nil),
                .init(sequences: [], release: [], cursor: nil, commitments: 0),
            ]
        )
        #expect(await replica.storedCursor == 6, "an empty page leaves the cursor where it was")
    }

    @Test func theFeedNamesOwnerAndTresorOnlyForASharedTresor() {
        let owner = UUID()
        let tresor = UUID()
        #expect(ReplicaFeed(owner: owner).query(since: 7) == "?since=7&limit=\(SyncPolicy.pullPage)")
        #expect(
            ReplicaFeed(owner: owner, tresor: tresor).query(since: 0)
                == "?owner=\(owner.uuidString)&tresor=\(tresor.uuidString)&since=0&limit=\(SyncPolicy.pullPage)"
        )
    }
}
