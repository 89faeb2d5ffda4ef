import Foundation
import Metrics
import VaultCore

/// Group commit of the audit appends that stand alone (Docs/design.md §6): a doctor's `records.read`, a
/// failed login. Every append takes the chain's head under its lock, on PostgreSQL a lock across every
/// instance, so one transaction per read would serialise every doctor's pull; instead the events of
/// concurrent requests are appended together, in one transaction that reads and moves the head once and
/// chains the entries in the order they arrived.
///
/// No event waits for company: when nothing is being written, the first one is written at once (a lone
/// request costs what it cost before, plus a task switch). The events that arrive while a transaction is
/// under way form the next one, at most `maxBatch` to a transaction. `append` returns once the
/// transaction holding its event has committed, and throws that transaction's error to every event in
/// it: a read whose audit failed fails, and its page is never returned. The write runs in a task of its
/// own, so one cancelled request does not roll back the others' entries.
public actor AuditBatcher {
    /// Appends events in one transaction; `now` is the transaction's time (each event carries its own).
    public typealias Append = @Sendable (_ events: [AuditEvent], _ now: UnixMillis) async throws -> Void

    /// The most events one transaction appends.
    public let maxBatch: Int
    private let write: Append
    private var queue: [Waiting] = []
    private var writing = false
    /// Transactions run so far (committed or not), and the events they held.
    public private(set) var transactions = 0
    public private(set) var events = 0
    /// Events waiting for the transaction under way to end.
    public var waiting: Int { queue.count }

    private struct Waiting {
        var event: AuditEvent
        var done: CheckedContinuation<Void, any Error>
    }

    public init(maxBatch: Int = 256, append: @escaping Append) {
        precondition(maxBatch > 0, "a batch holds at least one event")
        self.maxBatch = maxBatch
        self.write = append
    }

    /// Batches appended to `repository` (`AuditRepository.appendAudit`, one transaction each).
    public init(repository: any AuditRepository, maxBatch: Int = 256) {
        self.init(maxBatch: maxBatch) { events, now in try await repository.appendAudit(events, now: now) }
    }

    /// Appends `event`, which happened at `now`; returns once it is committed in the chain.
    public func append(_ event: AuditEvent, now: UnixMillis) async throws {
        var event = event
        if event.at == nil { event.at = now }
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            queue.append(Waiting(event: event, done: done))
            guard !writing else { return }
            writing = true
            Task { await self.drain() }
        }
    }

    /// Writes batches until nobody is waiting; the queue grows meanwhile, between the awaits.
    private func drain() async {
        while !queue.isEmpty {
            let batch = Array(queue.prefix(maxBatch))
            queue.removeFirst(batch.count)
            let events = batch.map(\.event)
            let now = events.compactMap(\.at).max() ?? Date().unixMillis
            let metrics = ServerMetrics.shared
            let started = ContinuousClock.now
            let result: Result<Void, any Error>
            do {
                try await write(events, now)
                result = .success(())
            } catch {
                result = .failure(error)
            }
            metrics.auditAppendDuration.record(duration: ContinuousClock.now - started)
            metrics.auditBatches.increment()
            metrics.auditBatchSize.record(batch.count)
            transactions += 1
            self.events += batch.count
            for w in batch { w.done.resume(with: result) }
        }
        writing = false
    }
}
