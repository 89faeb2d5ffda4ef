import NIOConcurrencyHelpers

/// Waiting with a limit for work that may never end: a database that stopped answering can leave a
/// driver's future, a query or a pool's shutdown pending for good, and a server must still answer (503)
/// and still stop.
enum Deadline {
    /// `task`'s value if it ends within `limit`, else nil; this returns by then either way. The task is
    /// neither cancelled nor waited for any longer.
    static func value<T: Sendable>(of task: Task<T, Never>, within limit: Duration) async -> T? {
        let waiter = NIOLockedValueBox<CheckedContinuation<T?, Never>?>(nil)
        @Sendable func finish(_ value: T?) {
            waiter.withLockedValue { w in
                defer { w = nil }
                return w
            }?.resume(returning: value)
        }
        return await withCheckedContinuation { continuation in
            waiter.withLockedValue { $0 = continuation }
            Task { finish(await task.value) }
            Task {
                try? await Task.sleep(for: limit)
                finish(nil)
            }
        }
    }
}
