import Foundation
import GRDB
import Synchronization
import VaultAPI
import VaultCore

/// How SQLite holds a write transaction across suspensions (Docs/design.md §6). GRDB runs its own
/// transactions as one synchronous closure on the writer's queue, and the flows written once for both
/// engines are async: so a flow's transaction is opened (`BEGIN IMMEDIATE`), fed one statement at a time
/// and ended on the writer connection with `writeWithoutTransaction`, between which the connection is left
/// inside the transaction. Nothing else may write meanwhile, or its statements would join the open
/// transaction (and GRDB's own `BEGIN` would fail): every write of this repository, the pushes' included,
/// goes through `write` or `transaction`, which take the repository's `WriteGate` first. SQLite has one
/// writer anyway; the gate only moves the wait from its lock to the repository.
extension SQLiteRepository: SQLStore {
    var dialect: SchemaDialect { .sqlite }

    /// Outside a transaction, a read runs on a reader of the pool (a snapshot of the last commit)...
    func rows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> [R] {
        try await pool.read { db in try db.rows(R.self, statement) }
    }

    /// ...and a change in a write of its own.
    func execute(_ statement: SQLStatement) async throws {
        try await write { db in try db.execute(statement) }
    }

    /// Runs `body` in one GRDB write transaction, behind the write gate.
    func write<R: Sendable>(_ body: @Sendable (Database) throws -> R) async throws -> R {
        try await gate.run { try await pool.write(body) }
    }

    func transaction<R: Sendable>(conflict: String?, _ body: (SQLiteWriter) async throws -> R) async throws -> R {
        let pool = self.pool
        return try await gate.run {
            let writer = SQLiteWriter(writer: pool)
            do {
                try await pool.writeWithoutTransaction { db in try db.beginTransaction(.immediate) }
                let result = try await body(writer)
                try await pool.writeWithoutTransaction { db in try db.commit() }
                return result
            } catch {
                Self.rollBack(pool)
                if let conflict, Self.isUniqueViolation(error) { throw RepositoryError.conflict(conflict) }
                throw error
            }
        }
    }

    /// Ends the open transaction, if any: synchronously, so a cancelled task (whose async database calls
    /// throw before they run) still rolls back before the gate opens for the next writer.
    private static func rollBack(_ pool: DatabasePool) {
        try? pool.writeWithoutTransaction { db in try db.rollback() }
    }
}

/// The writer connection inside a transaction of `SQLiteRepository.transaction` (or, in tests, of any GRDB
/// writer whose transaction the caller holds open): each statement is one short turn on the writer's queue.
struct SQLiteWriter: SQLConnection, Sendable {
    let writer: any DatabaseWriter
    var dialect: SchemaDialect { .sqlite }

    func rows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> [R] {
        try await writer.writeWithoutTransaction { db in try db.rows(R.self, statement) }
    }

    func execute(_ statement: SQLStatement) async throws {
        try await writer.writeWithoutTransaction { db in try db.execute(statement) }
    }
}

/// A first-come, first-served lock that waits without blocking a thread: SQLite's writers take it in turn.
final class WriteGate: Sendable {
    private struct State {
        var held = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Runs `body` once every writer before it has finished; the next one starts when it returns or throws.
    func run<R>(_ body: () async throws -> R) async throws -> R {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s in
                if s.held {
                    s.waiting.append(c)
                    return false
                }
                s.held = true
                return true
            }
            if now { c.resume() }
        }
        defer {
            let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
                guard !s.waiting.isEmpty else {
                    s.held = false
                    return nil
                }
                return s.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}
