import Foundation

/// The versions of one push, handed to the store in order, chunk by chunk, as their checks finish: the
/// store's transaction begins with the first chunk checked while the later envelopes are still being
/// verified on the other cores (Docs/benchmarks.md §2).
///
/// The producer delivers every chunk, in any order, or fails the whole stream; until then a reader waits.
/// A reader takes chunks in their index order: from a thread that may block (`nextBlocking`, SQLite's
/// writer queue) or from a task (`next`, PostgreSQL). A failed stream throws its error to the reader,
/// which rolls its transaction back: nothing of that push is stored.
public final class VersionChunks: @unchecked Sendable {
    private let condition = NSCondition()
    private var slots: [[VersionRow]?]
    private var failure: (any Error)?
    private var position = 0
    private var waiter: CheckedContinuation<[VersionRow]?, any Error>?

    /// A stream of `count` chunks to be delivered.
    public init(count: Int) {
        slots = Array(repeating: nil, count: max(0, count))
    }

    /// A stream already complete: `rows` as one chunk.
    public convenience init(_ rows: [VersionRow]) {
        self.init(count: 1)
        deliver(rows, at: 0)
    }

    /// Delivers chunk `index` (each index once; a second delivery is ignored).
    public func deliver(_ rows: [VersionRow], at index: Int) {
        resume {
            guard slots.indices.contains(index), slots[index] == nil, failure == nil else { return }
            slots[index] = rows
        }
    }

    /// Ends the stream with `error`: the reader's next take throws it. Ignored once the stream failed.
    public func fail(_ error: any Error) {
        resume { if failure == nil { failure = error } }
    }

    /// The next chunk, or nil after the last; waits for it by blocking this thread. Only for a thread that
    /// does not run the tasks producing the chunks.
    public func nextBlocking() throws -> [VersionRow]? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            switch try takeLocked() {
            case let .chunk(rows): return rows
            case .done: return nil
            case .wait: condition.wait()
            }
        }
    }

    /// The next chunk, or nil after the last; waits for it without blocking a thread.
    public func next() async throws -> [VersionRow]? {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<[VersionRow]?, any Error>) in
            condition.lock()
            defer { condition.unlock() }
            do {
                switch try takeLocked() {
                case let .chunk(rows): c.resume(returning: rows)
                case .done: c.resume(returning: nil)
                case .wait:
                    precondition(waiter == nil, "VersionChunks has one reader")
                    waiter = c
                }
            } catch {
                c.resume(throwing: error)
            }
        }
    }

    /// Every remaining chunk, joined in order.
    public func rest() async throws -> [VersionRow] {
        var rows: [VersionRow] = []
        while let chunk = try await next() { rows += chunk }
        return rows
    }

    private enum Take {
        case chunk([VersionRow])
        case done
        case wait
    }

    /// The chunk at the reader's position if it was delivered, or that every chunk was taken; throws the
    /// stream's failure. Called with the lock held.
    private func takeLocked() throws -> Take {
        if let failure { throw failure }
        guard position < slots.count else { return .done }
        guard let rows = slots[position] else { return .wait }
        slots[position] = []
        position += 1
        return .chunk(rows)
    }

    /// Applies `change` under the lock, then wakes a blocked reader and resumes a waiting one if it can go on.
    private func resume(_ change: () -> Void) {
        condition.lock()
        change()
        var ready: Result<[VersionRow]?, any Error>?
        if waiter != nil {
            do {
                switch try takeLocked() {
                case let .chunk(rows): ready = .success(rows)
                case .done: ready = .success(nil)
                case .wait: ready = nil
                }
            } catch {
                ready = .failure(error)
            }
        }
        let w = ready == nil ? nil : waiter
        if ready != nil { waiter = nil }
        condition.broadcast()
        condition.unlock()
        if let w, let ready { w.resume(with: ready) }
    }
}
