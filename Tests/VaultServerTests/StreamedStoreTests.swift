import Foundation
import Testing
import VaultTestSupport

@testable import VaultServer

/// A push is stored chunk by chunk while its later envelopes are still being checked (`VersionChunks`):
/// the outcome must be the one of storing the whole batch at once, and a push whose checks fail midway
/// must leave nothing behind.
@Suite("Repository: versions stored as their checks finish")
struct StreamedStoreTests {
    @Test(arguments: Backend.allCases)
    func chunksDeliveredOutOfOrderAreStoredInOrderAsOneBatch(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let owner = try await Fixtures.owner(repo)
            let tresor = UUID()
            let first = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 100)
            let other = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 1)
            let older = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 50)
            let newer = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 200)
            let third = Fixtures.version(owner: owner, record: "r3", tresor: tresor, physical: 7)
            let chunks = VersionChunks(count: 3)
            let stored = Task { try await repo.storeVersions(ownerID: owner, chunks, commitments: []) }
            // The last chunk first, then the others, each while the store waits for the one before.
            chunks.deliver([newer, third], at: 2)
            try await Task.sleep(for: .milliseconds(30))
            chunks.deliver([first, other], at: 0)
            try await Task.sleep(for: .milliseconds(30))
            chunks.deliver([first, older], at: 1)
            #expect(
                try await stored.value == [
                    .stored(sequence: 1), .stored(sequence: 2), .duplicate, .stored(sequence: nil), .stored(sequence: 3), .stored(sequence: 4),
                ],
                "a duplicate across chunks, an older version after its head and a newer one after both are judged as in one batch"
            )
            let changes = try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 10)
            #expect(changes.map(\.sequence) == [2, 3, 4])
            #expect(changes.map(\.envelope) == [other.envelope, newer.envelope, third.envelope])
        }
    }

    @Test(arguments: Backend.allCases)
    func aStreamFailingAfterItsFirstChunkStoresNothing(backend: Backend) async throws {
        struct ChecksFailed: Error, Equatable {}
        try await TestDatabase.with(backend) { repo in
            let owner = try await Fixtures.owner(repo)
            let tresor = UUID()
            let versions = (0..<6).map { Fixtures.version(owner: owner, record: "r\($0)", tresor: tresor, physical: Int64($0 + 1)) }
            let chunks = VersionChunks(count: 3)
            let stored = Task { try await repo.storeVersions(ownerID: owner, chunks, commitments: []) }
            chunks.deliver(Array(versions[0..<2]), at: 0)
            // By now the store has written the first chunk and waits for the second.
            try await Task.sleep(for: .milliseconds(50))
            chunks.fail(ChecksFailed())
            chunks.deliver(Array(versions[2..<4]), at: 1)
            await #expect(throws: ChecksFailed.self) { _ = try await stored.value }

            #expect(try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 10).isEmpty)
            // Rolled back whole: the versions are new again and the change sequence starts at 1.
            #expect(try await repo.storeVersions(ownerID: owner, versions) == (1...6).map { .stored(sequence: UInt64($0)) })
        }
    }

    @Test func aReaderWaitingOnAThreadOrATaskGetsEveryChunkInOrder() async throws {
        let rows = (0..<5).map { Fixtures.version(owner: UUID(), record: "r\($0)", tresor: UUID(), physical: 1) }
        let blocking = VersionChunks(count: 5)
        let waiting = VersionChunks(count: 5)
        // `nextBlocking` blocks its thread until the chunk comes: a thread of its own, not one of the pool's.
        let onThread = Task {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[String], any Error>) in
                Thread {
                    continuation.resume(
                        with: Result {
                            var got: [String] = []
                            while let chunk = try blocking.nextBlocking() { got += chunk.map(\.recordID) }
                            return got
                        }
                    )
                }
                .start()
            }
        }
        let inTask = Task { try await waiting.rest().map(\.recordID) }
        for i in [3, 0, 4, 1, 2] {
            try await Task.sleep(for: .milliseconds(5))
            blocking.deliver([rows[i]], at: i)
            waiting.deliver([rows[i]], at: i)
            waiting.deliver([rows[0]], at: i)  // a second delivery of an index is ignored
        }
        #expect(try await onThread.value == rows.map(\.recordID))
        #expect(try await inTask.value == rows.map(\.recordID))
        #expect(try await waiting.next() == nil, "nothing after the last chunk")
    }

    /// A record stays in the tresor it was first written to. The store checks it under its own lock, so
    /// two pushes at once cannot place one record in two tresors (a check before the store could not).
    @Test(arguments: Backend.allCases)
    func aVersionOfARecordInAnotherTresorIsRefusedAndNothingOfItStored(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let owner = try await Fixtures.owner(repo)
            let first = UUID()
            let second = UUID()
            let placed = Fixtures.version(owner: owner, record: "r1", tresor: first, physical: 10)
            #expect(try await repo.storeVersions(ownerID: owner, [placed]) == [.stored(sequence: 1)])
            let moved = Fixtures.version(owner: owner, record: "r1", tresor: second, physical: 20)
            let other = Fixtures.version(owner: owner, record: "r2", tresor: second, physical: 20)
            // Within one batch too: the first version of a new record places it.
            let fresh = Fixtures.version(owner: owner, record: "r3", tresor: first, physical: 5)
            let freshMoved = Fixtures.version(owner: owner, record: "r3", tresor: second, physical: 6)
            #expect(
                try await repo.storeVersions(ownerID: owner, [moved, other, fresh, freshMoved])
                    == [.misplaced, .stored(sequence: 2), .stored(sequence: 3), .misplaced]
            )
            let inSecond = try await repo.changes(ownerID: owner, tresorID: second, since: 0, limit: 10)
            #expect(inSecond.map(\.envelope) == [other.envelope], "the refused versions are neither heads nor stored")
            let inFirst = try await repo.changes(ownerID: owner, tresorID: first, since: 0, limit: 10)
            #expect(inFirst.map(\.envelope) == [placed.envelope, fresh.envelope])
            // Not stored: once the record is in the right tresor the same version id is new, not a duplicate.
            var back = moved
            back.tresorID = first
            #expect(try await repo.storeVersions(ownerID: owner, [back]) == [.stored(sequence: 4)])
        }
    }

    /// A batch of new ids is inserted plainly; one that repeats an id (a retried push, or an id another
    /// owner stored first) falls back inside the push's transaction, which must keep the commitment written
    /// before the fallback and store the rest of the batch.
    @Test(arguments: Backend.allCases)
    func aRepeatedVersionIDKeepsTheRestOfTheBatchAndItsCommitment(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let world = try await ShareWorld.make(repo)
            let owner = world.patient.id
            let tresor = world.tresorRow.id
            let stranger = try await Fixtures.owner(repo)
            // Fixtures.version derives the id from the fields without the owner: the same fields, the same id.
            let theirs = Fixtures.version(owner: stranger, record: "r9", tresor: UUID(), physical: 9)
            // A record id of the stranger's that the owner also uses: the owner's pushes must not touch its head.
            let theirR1 = Fixtures.version(owner: stranger, record: "r1", tresor: UUID(), physical: 100)
            #expect(try await repo.storeVersions(ownerID: stranger, [theirs, theirR1]) == [.stored(sequence: 1), .stored(sequence: 2)])
            let first = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 1)
            #expect(try await repo.storeVersions(ownerID: owner, [first]) == [.stored(sequence: 1)])

            let collision = Fixtures.version(owner: owner, record: "r9", tresor: tresor, physical: 9)
            #expect(collision.versionID == theirs.versionID)
            let newer = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 2)
            let fresh = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 1)
            let commitment = CommitmentRow(tresorID: tresor, sequence: 1, json: Array("state 1".utf8))
            #expect(
                try await repo.storeVersions(ownerID: owner, VersionChunks([first, collision, newer, fresh]), commitments: [commitment])
                    == [.duplicate, .duplicate, .stored(sequence: 2), .stored(sequence: 3)]
            )
            let page = try await repo.page(ownerID: owner, tresorID: tresor, since: 0, limit: 10, maxBytes: 1 << 20)
            #expect(page.changes.map(\.envelope) == [newer.envelope, fresh.envelope])
            #expect(page.commitments == [commitment], "the commitment written before the fallback is kept")
            #expect(
                try await repo.changes(ownerID: stranger, tresorID: nil, since: 0, limit: 10).map(\.envelope) == [theirs.envelope, theirR1.envelope]
            )

            // The next push of new ids takes the plain insert again, and its commitment must follow the stored one.
            let later = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 5)
            let next = CommitmentRow(tresorID: tresor, sequence: 2, json: Array("state 2".utf8))
            #expect(try await repo.storeVersions(ownerID: owner, VersionChunks([later]), commitments: [next]) == [.stored(sequence: 4)])
            let stale = CommitmentRow(tresorID: tresor, sequence: 2, json: Array("state 2 again".utf8))
            let refused = Fixtures.version(owner: owner, record: "r3", tresor: tresor, physical: 1)
            await #expect(throws: (any Error).self) {
                try await repo.storeVersions(ownerID: owner, VersionChunks([refused]), commitments: [stale])
            }
            let after = try await repo.page(ownerID: owner, tresorID: tresor, since: 0, limit: 10, maxBytes: 1 << 20)
            #expect(after.changes.map(\.envelope) == [newer.envelope, later.envelope])
            #expect(after.commitments == [next])
        }
    }

    /// An account deleted after its push was authenticated: the store finds no account under its lock and
    /// stores nothing (before, SQLite stored the versions for nobody, or failed a commitment's foreign key
    /// with a 500).
    @Test(arguments: Backend.allCases)
    func aPushForAnAccountDeletedMeanwhileStoresNothing(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let world = try await ShareWorld.make(repo)
            let owner = world.patient.id
            let tresor = world.tresorRow.id
            let first = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 1)
            #expect(try await repo.storeVersions(ownerID: owner, [first]) == [.stored(sequence: 1)])
            #expect(try await repo.storedState(owner: owner, tresor: tresor) != nil)
            let lifecycle: any AccountLifecycleRepository = repo
            #expect(try await lifecycle.deleteAccount(userID: owner, now: 1, audit: Fixtures.audit).versions == 1)
            #expect(try await repo.storedState(owner: owner, tresor: tresor) == nil, "the tresor's head state went with the account")
            // Twice (two requests at once): the second finds no account and audits nothing.
            let head = try await repo.auditHead()
            await #expect(throws: RepositoryError.notFound("account")) {
                try await lifecycle.deleteAccount(userID: owner, now: 2, audit: Fixtures.audit)
            }
            #expect(try await repo.auditHead().sequence == head.sequence)

            let late = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 1)
            let commitment = CommitmentRow(tresorID: tresor, sequence: 1, json: Array("state 1".utf8))
            await #expect(throws: RepositoryError.notFound("account")) {
                try await repo.storeVersions(ownerID: owner, VersionChunks([late]), commitments: [commitment])
            }
            await #expect(throws: RepositoryError.notFound("account")) { try await repo.storeVersions(ownerID: owner, [late]) }
            #expect(try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 10).isEmpty)
            let other = try await Fixtures.owner(repo)
            #expect(try await repo.storeVersions(ownerID: other, [late]) == [.stored(sequence: 1)], "nothing of the refused pushes was stored")
        }
    }
}
