import Foundation
import PostgresNIO
import Testing
import VaultTestSupport

@testable import VaultServer

/// A push and an account deletion meet at the owner's row in `owner_sequences` (PostgreSQL; SQLite's single
/// writer orders them). Each test holds one side open in a transaction of its own and lets the other run
/// into it, so the interleaving is the one named, not one a scheduler happened to pick.
@Suite("Repository: a push and its account's deletion, interleaved (PostgreSQL)")
struct PostgresStoreLockTests {
    /// Waits until a statement on this test's database waits for a lock (another transaction is blocked).
    /// `pg_locks` is the whole cluster's, and a transaction id lock names no database: filtered by the
    /// waiting session's database, so a test beside this one cannot stand in for it.
    static func untilSomeoneWaits(_ pg: PostgresRepository) async throws {
        for _ in 0..<1_000 {
            for try await n in try await pg.client.query(
                """
                SELECT count(*)::bigint FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE NOT l.granted AND a.datname = current_database()
                """,
                logger: pg.logger
            ).decode(Int64.self) where n > 0 { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("nothing waited for a lock within 10 s")
    }

    /// The deletion (its statements, run in a transaction of the test's) commits while the push waits for
    /// the owner's lock: the push finds the row gone and stores nothing, instead of storing versions for an
    /// account that no longer exists.
    @Test func aPushThatWaitedWhileItsAccountWasDeletedStoresNothing() async throws {
        try await TestDatabase.with(.postgres) { repo in
            let pg = try #require(repo as? PostgresRepository)
            let owner = try await Fixtures.owner(repo)
            let tresor = UUID()
            let first = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 1)
            #expect(try await repo.storeVersions(ownerID: owner, [first]) == [.stored(sequence: 1)])
            let late = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 1)
            let push = try await pg.transaction { conn in
                try await conn.query("SELECT 1 FROM owner_sequences WHERE owner_id = \(owner) FOR UPDATE", logger: pg.logger)
                let push = Task { try await repo.storeVersions(ownerID: owner, [late]) }
                try await Self.untilSomeoneWaits(pg)
                // The deletion's own statements after its lock (AccountSQL.deleteAccount), the account included.
                for statement in AccountSQL.deleteAccount(owner) { try await conn.query(statement.postgresQuery, logger: pg.logger) }
                return push
            }
            await #expect(throws: RepositoryError.notFound("account")) { _ = try await push.value }
            #expect(try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 10).isEmpty)
            // Not stored: the same version is new under another account.
            let other = try await Fixtures.owner(repo)
            #expect(try await repo.storeVersions(ownerID: other, [late]) == [.stored(sequence: 1)])
        }
    }

    /// A first push (its sequence row not yet committed) is in flight when the deletion starts: the
    /// deletion waits for it and removes what it stored, instead of reading around it and leaving its
    /// versions and heads behind without an account.
    @Test func aDeletionWaitsForAFirstPushInFlightAndRemovesItsVersions() async throws {
        try await TestDatabase.with(.postgres) { repo in
            let pg = try #require(repo as? PostgresRepository)
            let owner = try await Fixtures.owner(repo)
            let v = Fixtures.version(owner: owner, record: "r1", tresor: UUID(), physical: 1)
            let deletion = try await pg.transaction { conn in
                // The push's own statements, in its order, up to its commit.
                try await conn.query("INSERT INTO owner_sequences (owner_id, last_sequence) VALUES (\(owner), 1)", logger: pg.logger)
                try await conn.query(
                    """
                    INSERT INTO versions (version_id, owner_id, record_id, tresor_id, epoch, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                    VALUES (\(v.versionID), \(owner), \(v.recordID), \(v.tresorID), 1, \(v.hlcPhysical), \(v.hlcCounter), \(v.hlcDevice),
                            \(v.deleted), \(ByteBuffer(bytes: v.envelope)))
                    """,
                    logger: pg.logger
                )
                try await conn.query(
                    """
                    INSERT INTO heads (owner_id, record_id, tresor_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, sequence, changed_at)
                    VALUES (\(owner), \(v.recordID), \(v.tresorID), \(v.versionID), \(v.hlcPhysical), \(v.hlcCounter), \(v.hlcDevice), \(v.deleted), 1, 1)
                    """,
                    logger: pg.logger
                )
                let deletion = Task { try await pg.deleteAccount(userID: owner, now: 1, audit: Fixtures.audit) }
                try await Self.untilSomeoneWaits(pg)
                return deletion
            }
            #expect(try await deletion.value.versions == 1, "the deletion saw the push's version")
            #expect(try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 10).isEmpty)
            await #expect(throws: RepositoryError.notFound("account")) { try await repo.storeVersions(ownerID: owner, [v]) }
            let other = try await Fixtures.owner(repo)
            #expect(try await repo.storeVersions(ownerID: other, [v]) == [.stored(sequence: 1)], "the version id is free: the version is gone")
        }
    }
}
