import Foundation

/// Blocking work run on threads of its own, never on Swift's cooperative pool.
///
/// The pool has one thread per core (two on the machines CareVault is tested on). A call that holds a
/// pool thread for long (Argon2id takes a quarter of a second and 256 MiB; a child process, a large
/// synchronous database transaction) stalls every task of the process meanwhile: continuations of network
/// answers cannot resume, timers fire late, and a server in the same process stops answering. Such work goes
/// through `OffPool.run`, which hands it to one of a fixed set of dedicated threads (one per core, so at most
/// that many Argon2id runs hold their memory at once) and suspends the task until it is done.
///
/// `Scripts/lint-blocking` keeps the rule checkable: it fails on the blocking calls it knows that are
/// not marked as running off the pool.
public enum OffPool {
    /// `work`'s result, computed on a dedicated thread while the calling task is suspended. Work is started
    /// in the order it was handed over; cancellation does not interrupt work that has started.
    public static func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            Workers.shared.submit { continuation.resume(with: Result { try work() }) }
        }
    }

    /// The same for work that cannot fail.
    public static func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<T, Never>) in
            Workers.shared.submit { continuation.resume(returning: work()) }
        }
    }

    /// True on one of `run`'s threads (for checks that a blocking call is not made on the pool).
    public static var isOnWorkerThread: Bool { Thread.current.threadDictionary[Workers.marker] != nil }

    /// A queue of jobs and a fixed set of threads that take them in turn, started on first use.
    final class Workers: @unchecked Sendable {
        static let shared = Workers(count: max(2, ProcessInfo.processInfo.activeProcessorCount))
        static let marker = "carevault.off-pool"

        private let condition = NSCondition()
        private var jobs: [@Sendable () -> Void] = []
        private var head = 0

        init(count: Int) {
            for index in 0..<count {
                let thread = Thread { [self] in
                    Thread.current.threadDictionary[Self.marker] = true
                    while true { take()() }
                }
                thread.name = "carevault-offpool-\(index)"
                thread.start()
            }
        }

        func submit(_ job: @escaping @Sendable () -> Void) {
            condition.lock()
            jobs.append(job)
            condition.signal()
            condition.unlock()
        }

        private func take() -> @Sendable () -> Void {
            condition.lock()
            defer { condition.unlock() }
            // blocking: OffPool's own threads wait for work here
            while head == jobs.count { condition.wait() }
            let job = jobs[head]
            head += 1
            // Taken jobs are dropped now and then, so the queue does not grow for the life of the process.
            if head > 64, head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            return job
        }
    }
}
