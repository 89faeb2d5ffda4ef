import Foundation
import Testing
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// One stored head as a test reads it from `heads`.
private struct HeadOfTest: StoredRowDecodable, Sendable {
    var recordID: String
    var versionID: String
    var deleted: Bool
    var timestamp: HLCTimestamp
    init(stored r: some StoredRow) throws {
        recordID = try r.string("record_id")
        versionID = try r.string("version_id")
        deleted = try r.bool("deleted")
        timestamp = HLCTimestamp(
            physicalMs: UInt64(try r.int64("hlc_physical")),
            counter: UInt32(try r.int64("hlc_counter")),
            deviceID: try r.string("hlc_device")
        )
    }
}

extension VaultRepository {
    /// Rows of `statement`, read outside the repository's rules.
    fileprivate func testRows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> [R] {
        if let sqlite = self as? SQLiteRepository { return try await sqlite.rows(R.self, statement) }
        return try await #require(self as? PostgresRepository).rows(R.self, statement)
    }

    /// The stored head state of `tresor` (nil: no row).
    func storedState(owner: UUID, tresor: UUID) async throws -> HeadSet? {
        try await testRows(TresorState.self, TresorStateSQL.load(owner: owner, tresorID: tresor)).first?.set
    }

    /// The state computed from scratch: every stored head of `tresor` added to an empty set.
    func foldOfHeads(owner: UUID, tresor: UUID) async throws -> HeadSet {
        var set = HeadSet()
        let heads = try await testRows(
            HeadOfTest.self,
            "SELECT record_id, version_id, deleted, hlc_physical, hlc_counter, hlc_device FROM heads WHERE owner_id = \(owner) AND tresor_id = \(tresor)"
        )
        for h in heads {
            try set.hash.add(recordID: h.recordID, versionID: h.versionID)
            if h.deleted { set.deleted += 1 } else { set.live += 1 }
            set.newest = max(set.newest, h.timestamp)
        }
        return set
    }
}

/// Each tresor's head state beside its commitment (Docs/commitment-pages.md §5): the fold of its heads
/// after every store, computed once by the migration for tresors that had heads before, and compared with
/// a commitment that checks its batch in the store's own transaction.
@Suite("Repository: each tresor's head state")
struct TresorStateTests {
    /// A commitment to `state`, signed by some patient (the store compares, the service verifies).
    static func commitment(_ tresor: UUID, sequence: UInt64, state: HeadSet) -> CommitmentRow {
        let c = StateCommitment.make(
            patient: .generate(),
            tresorID: tresor,
            category: "interventions",
            sequence: sequence,
            state: state,
            topEpoch: 1,
            tresorVersion: 1,
            committedAt: 1
        )
        return CommitmentRow(tresorID: tresor, sequence: sequence, json: Array("state \(sequence)".utf8), expected: c)
    }

    @Test(arguments: Backend.allCases)
    func theStoredStateIsTheFoldOfTheHeadsAfterMixedPushes(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            // A declared tresor (its commitment refers to it) and one the store knows only from its heads.
            let world = try await ShareWorld.make(repo)
            let owner = world.patient.id
            let (a, b) = (world.tresorRow.id, UUID())
            func v(_ r: String, _ t: UUID, _ p: Int64, deleted: Bool = false, device: String = "d1") -> VersionRow {
                Fixtures.version(owner: owner, record: r, tresor: t, physical: p, device: device, deleted: deleted)
            }
            func expectFold(_ note: Comment) async throws {
                for t in [a, b] {
                    let stored = try await repo.storedState(owner: owner, tresor: t) ?? HeadSet()
                    #expect(stored == (try await repo.foldOfHeads(owner: owner, tresor: t)), note)
                }
            }
            #expect(try await repo.storedState(owner: owner, tresor: a) == nil, "no row before the first head")
            // Three new heads, one a tombstone, and one in the other tresor; no commitment.
            _ = try await repo.storeVersions(ownerID: owner, [v("r1", a, 10), v("r2", a, 10), v("r3", a, 12, deleted: true), v("s1", b, 3)])
            try await expectFold("new heads")
            // A replacement, an older version (not a head), a new record and two versions of one record in one batch.
            let out = try await repo.storeVersions(ownerID: owner, [v("r1", a, 20), v("r2", a, 5), v("r4", a, 1), v("s1", b, 4), v("s1", b, 6)])
            #expect(out == [.stored(sequence: 5), .stored(sequence: nil), .stored(sequence: 6), .stored(sequence: 7), .stored(sequence: 8)])
            try await expectFold("replacements")
            // A duplicate, a tombstone replacing a live head, a live head replacing a tombstone, and a misplaced version.
            let out2 = try await repo.storeVersions(
                ownerID: owner,
                [v("r1", a, 20), v("r1", a, 30, deleted: true), v("r3", a, 40), v("r2", b, 50)]
            )
            #expect(out2 == [.duplicate, .stored(sequence: 9), .stored(sequence: 10), .misplaced])
            try await expectFold("tombstones, a duplicate and a misplaced version")
            let state = try #require(try await repo.storedState(owner: owner, tresor: a))
            #expect(state.live == 3 && state.deleted == 1, "r2, r3, r4 live; r1 a tombstone")
            #expect(state.newest == HLCTimestamp(physicalMs: 40, counter: 0, deviceID: "d1"))

            // A push that carries a matching commitment stores, and the state is still the fold.
            var next = state
            let r5 = v("r5", a, 60)
            try next.replace(
                recordID: r5.recordID,
                old: nil,
                with: .init(versionID: r5.versionID, deleted: false, timestamp: .init(physicalMs: 60, counter: 0, deviceID: "d1"))
            )
            let matching = Self.commitment(a, sequence: 1, state: next)
            #expect(try await repo.storeVersions(ownerID: owner, [r5], commitments: [matching]) == [.stored(sequence: 11)])
            #expect(try await repo.storedState(owner: owner, tresor: a) == next)
            try await expectFold("a push checked by its commitment")
        }
    }

    @Test(arguments: Backend.allCases)
    func aMismatchRollsBackTheWholeBatch(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let world = try await ShareWorld.make(repo)
            let owner = world.patient.id
            let (a, b) = (world.tresorRow.id, UUID())
            let first = Fixtures.version(owner: owner, record: "r1", tresor: a, physical: 1)
            let start = Self.commitment(a, sequence: 1, state: try await Self.after([first], repo: repo, owner: owner, tresor: a))
            #expect(try await repo.storeVersions(ownerID: owner, [first], commitments: [start]) == [.stored(sequence: 1)])
            let before = try await repo.storedState(owner: owner, tresor: a)

            let newer = Fixtures.version(owner: owner, record: "r1", tresor: a, physical: 2)
            let other = Fixtures.version(owner: owner, record: "r2", tresor: a, physical: 2)
            let elsewhere = Fixtures.version(owner: owner, record: "s1", tresor: b, physical: 2)
            // The commitment counts `newer` as a head but the batch carries `other` in its place.
            let wrong = Self.commitment(a, sequence: 2, state: try await Self.after([newer], repo: repo, owner: owner, tresor: a))
            await #expect(throws: RepositoryError.commitmentMismatch(a)) {
                try await repo.storeVersions(ownerID: owner, VersionChunks([elsewhere, other]), commitments: [wrong])
            }
            // An older version of the record, which the store keeps but does not make the head.
            let older = Fixtures.version(owner: owner, record: "r1", tresor: a, physical: 0)
            let countsOlder = Self.commitment(a, sequence: 2, state: try await Self.after([older], repo: repo, owner: owner, tresor: a))
            await #expect(throws: RepositoryError.commitmentMismatch(a)) {
                try await repo.storeVersions(ownerID: owner, [older], commitments: [countsOlder])
            }
            #expect(try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 10).map(\.envelope) == [first.envelope], "nothing stored")
            #expect(try await repo.storedState(owner: owner, tresor: a) == before)
            #expect(try await repo.storedState(owner: owner, tresor: b) == nil)
            let page = try await repo.page(ownerID: owner, tresorID: a, since: 0, limit: 10, maxBytes: 1 << 20)
            #expect(page.commitments.map(\.sequence) == [1], "the commitment was not replaced")
            // No sequence number was used: the next push takes 2, and its commitment at sequence 2 is not stale.
            let right = Self.commitment(a, sequence: 2, state: try await Self.after([newer], repo: repo, owner: owner, tresor: a))
            #expect(
                try await repo.storeVersions(ownerID: owner, [elsewhere, newer], commitments: [right]) == [
                    .stored(sequence: 2), .stored(sequence: 3),
                ]
            )
        }
    }

    /// The state `versions` would leave in `tresor` if each became its record's head.
    static func after(_ versions: [VersionRow], repo: any VaultRepository, owner: UUID, tresor: UUID) async throws -> HeadSet {
        var state = try await repo.foldOfHeads(owner: owner, tresor: tresor)
        let heads = try await repo.testRows(
            HeadOfTest.self,
            "SELECT record_id, version_id, deleted, hlc_physical, hlc_counter, hlc_device FROM heads WHERE owner_id = \(owner) AND tresor_id = \(tresor)"
        )
        for v in versions {
            let old = heads.first { $0.recordID == v.recordID }.map {
                HeadSet.Head(versionID: $0.versionID, deleted: $0.deleted, timestamp: $0.timestamp)
            }
            let ts = HLCTimestamp(physicalMs: UInt64(v.hlcPhysical), counter: UInt32(v.hlcCounter), deviceID: v.hlcDevice)
            try state.replace(recordID: v.recordID, old: old, with: .init(versionID: v.versionID, deleted: v.deleted, timestamp: ts))
        }
        return state
    }

    /// A database written by the previous version (heads, no `tresor_states`, the migration not recorded):
    /// the migration computes each tresor's state from its heads, the same as the incremental store did.
    @Test(arguments: Backend.allCases)
    func theMigrationComputesTheStateOfExistingTresors(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let owner = try await Fixtures.owner(repo)
            let other = try await Fixtures.owner(repo)
            let (a, b, c) = (UUID(), UUID(), UUID())
            _ = try await repo.storeVersions(
                ownerID: owner,
                [
                    Fixtures.version(owner: owner, record: "r1", tresor: a, physical: 5),
                    Fixtures.version(owner: owner, record: "r2", tresor: a, physical: 7, deleted: true),
                    Fixtures.version(owner: owner, record: "r1", tresor: a, physical: 9, counter: 3, device: "d2"),
                    Fixtures.version(owner: owner, record: "s1", tresor: b, physical: 1),
                ]
            )
            _ = try await repo.storeVersions(ownerID: other, [Fixtures.version(owner: other, record: "t1", tresor: c, physical: 2)])
            let incremental = [
                a: try #require(try await repo.storedState(owner: owner, tresor: a)),
                b: try #require(try await repo.storedState(owner: owner, tresor: b)),
                c: try #require(try await repo.storedState(owner: other, tresor: c)),
            ]
            #expect(incremental[a]?.live == 1 && incremental[a]?.deleted == 1)
            #expect(incremental[a]?.newest == HLCTimestamp(physicalMs: 9, counter: 3, deviceID: "d2"))

            try await repo.attackerExecutes(
                "DROP TABLE tresor_states;"
                    + (backend == .sqlite
                        ? "DELETE FROM grdb_migrations WHERE identifier = 'v10-tresor-states'"
                        : "DELETE FROM schema_migrations WHERE name = 'v10-tresor-states'")
            )
            try await repo.migrate()
            #expect(try await repo.storedState(owner: owner, tresor: a) == incremental[a])
            #expect(try await repo.storedState(owner: owner, tresor: b) == incremental[b])
            #expect(try await repo.storedState(owner: other, tresor: c) == incremental[c])
            #expect(try await repo.storedState(owner: owner, tresor: UUID()) == nil)
            // And the store goes on from there.
            let next = Fixtures.version(owner: owner, record: "r3", tresor: a, physical: 11)
            _ = try await repo.storeVersions(ownerID: owner, [next])
            #expect(try await repo.storedState(owner: owner, tresor: a) == (try await repo.foldOfHeads(owner: owner, tresor: a)))
        }
    }
}
