import Foundation
import GRDB
import VaultAPI
import VaultCore

/// How SQLite runs a flow written once for both engines (Docs/design.md §6): inside one GRDB write, on the
/// writer's own thread, from its first statement to its last. The flows are async functions over a
/// `SQLConnection`; over a GRDB `Database` none of their calls suspends, so `Database.run` drives the flow
/// to its end on the thread that holds the write, and SQLite's single writer stays held for the flow's
/// statements only, never across a wait for a thread of the task pool.
extension SQLiteRepository: SQLStore {
    var dialect: SchemaDialect { .sqlite }

    /// Outside a transaction, a read runs on a reader of the pool (a snapshot of the last commit)...
    func rows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> [R] {
        try await pool.read { db in try db.rows(R.self, statement) }
    }

    /// ...and a change in a write of its own.
    func execute(_ statement: SQLStatement) async throws {
        try await pool.write { db in try db.execute(statement) }
    }

    /// `body` in one GRDB write transaction (rolled back when it throws, or when the task is cancelled,
    /// which interrupts its statement).
    func transaction<R: Sendable>(conflict: String?, _ body: @Sendable (Database) async throws -> R) async throws -> R {
        do {
            return try await pool.write { db in try db.run(body) }
        } catch  where Self.isUniqueViolation(error) {
            guard let conflict else { throw error }
            throw RepositoryError.conflict(conflict)
        }
    }
}

extension Database {
    /// Runs `flow` over this connection to its end, on the current thread, and returns its result. For
    /// flows that do not suspend but to call this connection (a `SQLConnection` whose calls never do): its
    /// jobs run here, one after another, so every statement runs inside the caller's database access. This
    /// thread waits meanwhile: call it inside a GRDB access (a queue's thread), never from a task, and the
    /// flow must not wait for this database's writer itself (a write of the repository), which waits for it.
    func run<R: Sendable>(_ flow: @Sendable (Database) async throws -> R) throws -> R {
        try withoutActuallyEscaping(flow) { flow in
            let executor = CurrentThreadExecutor()
            let outcome = ResultBox<R>()
            let db = UncheckedSendable(self)
            Task(executorPreference: executor) {
                do { outcome.set(.success(try await flow(db.value))) } catch { outcome.set(.failure(error)) }
                executor.wake()
            }
            executor.runJobs(until: { outcome.isSet })
            return try outcome.get()
        }
    }
}

/// A task executor whose jobs run on the thread that calls `runJobs`, in the order they came.
private final class CurrentThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.withLock {
            jobs.append(job)
            condition.signal()
        }
    }

    /// Wakes `runJobs` to look at its condition again.
    func wake() { condition.withLock { condition.signal() } }

    /// Runs jobs as they come until `done` holds and none is left.
    func runJobs(until done: () -> Bool) {
        while true {
            let next: UnownedJob? = condition.withLock {
                while jobs.isEmpty && !done() { condition.wait() }
                return jobs.isEmpty ? nil : jobs.removeFirst()
            }
            guard let next else { return }
            next.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// The outcome of a flow, set once by its task and read by the thread that ran it.
private final class ResultBox<R: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<R, any Error>?

    var isSet: Bool { lock.withLock { result != nil } }
    func set(_ r: Result<R, any Error>) { lock.withLock { result = r } }

    func get() throws -> R {
        guard let result = lock.withLock({ result }) else { preconditionFailure("the flow did not end") }
        return try result.get()
    }
}

/// The connection handed to the flow's task, which runs on the thread that holds it (`Database.run`).
private struct UncheckedSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
