/// Runs the dashboard's reads of the doctor's cache one at a time: a page being rendered and the live
/// loop's pull never interleave inside the reader (an actor lets a second call in at every `await`), so
/// each sees the cache as one command of the tool would.
actor SerialReads {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// `body`, after every read started before it has ended.
    func run<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        if busy {
            await withCheckedContinuation { waiting.append($0) }
        } else {
            busy = true
        }
        defer { handOver() }
        return try await body()
    }

    private func handOver() {
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
    }
}
