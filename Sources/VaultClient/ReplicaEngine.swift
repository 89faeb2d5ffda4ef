import Foundation
import VaultCore

/// The changes one replica follows (Docs/design.md §5): every tresor of the signed-in owner (a patient's
/// own device), or one tresor of another owner shared with this reader (a doctor's share).
struct ReplicaFeed: Sendable, Hashable {
    /// Whose records.
    var owner: UUID
    /// The one tresor followed; nil for every tresor of the owner (the signed-in owner's own feed).
    var tresor: UUID?

    /// The query of `GET /v1/records` for the page after `since`: the owner's own feed names neither
    /// owner nor tresor, a shared tresor names both.
    func query(since: UInt64) -> String {
        let scope = tresor.map { "owner=\(owner.uuidString)&tresor=\($0.uuidString)&" } ?? ""
        return "?\(scope)since=\(since)&limit=\(SyncPolicy.pullPage)"
    }
}

/// What storing checked changes did: conflicts it resolved (a patient's merge), and what is wrong with
/// the commitments of a final page in plain words (empty when nothing is, or none were checked).
struct ReplicaStored: Sendable {
    var resolved = 0
    var problems: [String] = []
    /// The tresors whose server is behind the state accepted before (their messages are among `problems`).
    var behind: [ServerBehind] = []
    /// Changes that were already the local copy, byte for byte (a device's own pushes coming back).
    var echoes = 0
}

/// The one step where the replicas differ (Docs/design.md §5): what a pulled page does to the local copy.
/// A patient's device merges each version with its own copy; a doctor's cache keeps verified envelopes.
/// Both keep the same things per feed: a cursor, the quarantined records, and the copy of the server's
/// heads that the newest state commitment is checked against (Docs/envelope-v1.md §3.4).
protocol ReplicaApplier: Sendable {
    /// A page's changes once `verify` has seen them.
    associatedtype Verified: Sendable

    /// The last change sequence stored for the feed (0 before the first pull).
    func cursor() async throws -> UInt64
    /// The feed's quarantined records, by sequence.
    func quarantined() async throws -> [QuarantinedRecord]
    /// The checks of one page's changes that need no local state (signatures, context, decryption): they
    /// run while the page before is stored. A change that fails is marked for quarantine, never thrown.
    func verify(_ changes: [PulledChange]) async throws -> Verified
    /// `verify` for a final page with the `commitments` it carried (nil for any other page): a reader may
    /// leave out the signature checks of the records a commitment authenticates (Docs/commitment-pages.md).
    func verify(_ changes: [PulledChange], commitments: [StateCommitment]?) async throws -> Verified
    /// `verify` for a page of a pull before its final one: a reader may leave out checks that the final
    /// page's commitment can still do for it, if the store then holds the page back until it has
    /// (Docs/commitment-pages.md §8).
    func verifyAhead(_ changes: [PulledChange]) async throws -> Verified
    /// Stores verified changes in one transaction: those that pass go into the copy (and the copy of the
    /// server's heads), those that fail into quarantine (healing older quarantined versions of a record
    /// that now verifies), the quarantined `release` sequences leave it, and the cursor moves to `cursor`
    /// when given. With `commitments` (the final page's, possibly none) it then checks them against the
    /// copy of the server's heads and accepts those that hold; what is wrong comes back, never thrown.
    func store(_ verified: Verified, release: [UInt64], cursor: UInt64?, commitments: [StateCommitment]?) async throws -> ReplicaStored
    /// Drops what the applier holds in memory for a pull under way (pages `verifyAhead` checked and `store`
    /// kept back without moving the cursor): called when a pull begins, and when it ends without its final page.
    func forgetHeld()
}

extension ReplicaApplier {
    /// Every record checked on its own, whatever the page carries.
    func verify(_ changes: [PulledChange], commitments: [StateCommitment]?) async throws -> Verified { try await verify(changes) }
    /// Every record checked on its own.
    func verifyAhead(_ changes: [PulledChange]) async throws -> Verified { try await verify(changes) }
    /// Nothing is held in memory.
    func forgetHeld() {}
}

/// What a pull did.
struct ReplicaPull: Sendable {
    /// Changes pulled.
    var pulled = 0
    /// Conflicts resolved while storing them.
    var resolved = 0
    /// What is wrong with the final page's commitments, in plain words.
    var problems: [String] = []
    /// The tresors whose server is behind the state accepted before (their messages are among `problems`).
    var behind: [ServerBehind] = []
    /// Changes pulled that were already the local copy (`ReplicaStored.echoes`).
    var echoes = 0

    /// Counts what one store did.
    mutating func add(_ stored: ReplicaStored) {
        resolved += stored.resolved
        echoes += stored.echoes
    }
}

/// The one pull path of both readers (Docs/design.md §5): pages of one feed fetched, verified, stored with
/// their cursor, failures quarantined, and once the server says it sent everything its commitments checked
/// against the copy of its heads. `Applier` is the step that differs. A page that arrives by any other way
/// than `pull` goes through `receive`, the same verify-then-store.
struct ReplicaEngine<Applier: ReplicaApplier>: Sendable {
    /// Fetches the page of `query` that must follow `after`, with a final page's commitments.
    typealias Fetch = @Sendable (_ query: String, _ after: UInt64) async throws -> (page: PulledPage, commitments: [StateCommitment])

    let feed: ReplicaFeed
    let applier: Applier
    let fetch: Fetch

    init(feed: ReplicaFeed, applier: Applier, fetch: @escaping Fetch) {
        self.feed = feed
        self.applier = applier
        self.fetch = fetch
    }

    /// An engine that fetches its pages from the server with `auth`.
    init(feed: ReplicaFeed, applier: Applier, transport: Transport, auth: Transport.Auth) {
        self.init(feed: feed, applier: applier) { query, after in try await transport.pullPage(query: query, after: after, auth: auth) }
    }

    /// The page after `since`.
    func page(after since: UInt64) async throws -> (page: PulledPage, commitments: [StateCommitment]) {
        try await fetch(feed.query(since: since), since)
    }

    /// A page arrived for this feed (`commitments` when it is a final one): verified, then stored in one
    /// transaction with the cursor moved to its last change (left where it is when it holds none).
    /// Returns what storing it did.
    func receive(_ page: PulledPage, commitments: [StateCommitment]?) async throws -> ReplicaStored {
        let cursor = page.changes.last?.sequence
        let verified = try await applier.verify(page.changes, commitments: commitments)
        return try await applier.store(verified, release: [], cursor: cursor, commitments: commitments)
    }

    /// Fetches the quarantined records again and stores those that now verify; a sequence that holds no
    /// change any more leaves quarantine (the record's newer head comes with the regular pull). Returns
    /// how many conflicts storing them resolved.
    func retryQuarantined() async throws -> Int {
        let held = try await applier.quarantined()
        guard !held.isEmpty else { return 0 }
        let (found, gone) = try await refetch(held.map(\.sequence), upTo: try await applier.cursor())
        return try await applier.store(try await applier.verify(found), release: gone, cursor: nil, commitments: nil).resolved
    }

    /// Pulls pages until the server says it sent everything, then checks the commitments that final page
    /// carried (Docs/envelope-v1.md §3.4). `progress` gets the changes pulled so far.
    ///
    /// Pages overlap: the next page is fetched while this one is verified, and a verified page is stored
    /// (with its cursor, in order) while the next one is verified, so the server's work and the local
    /// writes run beside the signature checks. Three pages at most are held at once (one fetched ahead,
    /// one verified, one being stored), each let go once stored; one store is in flight at a time, so
    /// stores slower than checks hold the loop back, and a store that fails stops it at the next page.
    /// With `since`, the pull starts after that sequence instead of the stored cursor (0: every head again,
    /// as a device healing a server that is behind does, Docs/design.md §5.2).
    ///
    /// A pull that began after a cursor and ends with a commitment that does not hold, while no tresor of
    /// the feed is behind, is done once more from the start: after a restored backup was healed, the
    /// changes the reader lacks can sit at sequences below its cursor (Docs/design.md §5.2). What that
    /// second pull finds is what is reported.
    func pull(since: UInt64? = nil, progress: (@Sendable (Int) -> Void)? = nil) async throws -> ReplicaPull {
        var cursor: UInt64
        if let since { cursor = since } else { cursor = try await applier.cursor() }
        let first = try await pull(after: cursor, progress: progress)
        guard cursor > 0, !first.problems.isEmpty, first.behind.isEmpty else { return first }
        let done = first.pulled
        var again = try await pull(after: 0) { n in progress?(done + n) }
        again.pulled += first.pulled
        again.resolved += first.resolved
        again.echoes += first.echoes
        // A server that now claims to be behind keeps what the first pull caught (a forged commitment, say):
        // nothing it showed before is forgotten by showing less.
        if !again.behind.isEmpty { again.problems = first.problems + again.problems.filter { !first.problems.contains($0) } }
        return again
    }

    /// One pull from `cursor` on, as `pull` describes.
    private func pull(after start: UInt64, progress: (@Sendable (Int) -> Void)?) async throws -> ReplicaPull {
        var cursor = start
        var result = ReplicaPull()
        applier.forgetHeld()
        var fetching = Task { [cursor] in try await page(after: cursor) }
        var storing: Task<ReplicaStored, any Error>?
        do {
            while true {
                let (page, commitments) = try await fetching.value
                let next = page.changes.last?.sequence ?? cursor
                if !page.done, !page.changes.isEmpty { fetching = Task { try await self.page(after: next) } }
                let final = page.done ? commitments : nil
                // A final page a commitment may authenticate is checked against the heads of every page before it.
                if final?.isEmpty == false, let stored = try await storing?.value {
                    result.add(stored)
                    storing = nil
                }
                let verified = try await page.done ? applier.verify(page.changes, commitments: final) : applier.verifyAhead(page.changes)
                if let stored = try await storing?.value { result.add(stored) }
                let applier = self.applier
                storing = Task { try await applier.store(verified, release: [], cursor: next, commitments: final) }
                result.pulled += page.changes.count
                progress?(result.pulled)
                cursor = next
                guard page.done else {
                    // An honest server ends with a page that says so; an empty page that does not is a way to skip the check.
                    if page.changes.isEmpty { throw ClientError.integrity("the server stopped sending changes without saying it sent them all") }
                    continue
                }
                if let stored = try await storing?.value {
                    result.add(stored)
                    result.problems = stored.problems
                    result.behind = stored.behind
                }
                return result
            }
        } catch {
            // Nothing outlives the pull: the fetch ahead is dropped, the store already begun ends first.
            fetching.cancel()
            _ = try? await storing?.value
            applier.forgetHeld()
            throw error
        }
    }

    /// Fetches again the changes at the quarantined `sequences` (all at or below `cursor`), a page at a
    /// time from the lowest one still open. Returns the changes found at those sequences, and the
    /// sequences that hold no change any more (the record has a newer head at a later sequence, which
    /// the regular pull delivers or delivered).
    func refetch(_ sequences: [UInt64], upTo cursor: UInt64) async throws -> (found: [PulledChange], gone: [UInt64]) {
        var open = sequences.filter { $0 > 0 && $0 <= cursor }.sorted()
        var found: [PulledChange] = []
        var gone: [UInt64] = []
        while let lowest = open.first {
            let page = try await page(after: lowest - 1).page
            // What this page answers for: up to its last change, or everything when it is the last page.
            let covered = page.done || page.changes.isEmpty ? cursor : min(cursor, page.changes.last!.sequence)
            let bySequence = Dictionary(page.changes.map { ($0.sequence, $0) }, uniquingKeysWith: { a, _ in a })
            let answered = open.prefix { $0 <= covered }
            for s in answered {
                if let change = bySequence[s] { found.append(change) } else { gone.append(s) }
            }
            open.removeFirst(answered.count)
        }
        return (found, gone)
    }
}
