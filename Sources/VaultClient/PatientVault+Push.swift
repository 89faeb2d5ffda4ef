import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

extension PatientVault {
    // MARK: Push

    /// Pushes the outbox in batches, each with the patient's commitment to every tresor it changes
    /// (Docs/envelope-v1.md §3.4). Commitments of one tresor must reach the server in order, and each is
    /// signed over the state the server will hold once it stores its batch: the batch before it, as
    /// planned. So a batch goes out as soon as the server answered the one before, and that one is
    /// acknowledged here while the server works on the next. Each batch is acknowledged in its own
    /// transaction, in order; an interrupted push leaves the unacknowledged batches queued (the server
    /// answers a repeat as a duplicate). A batch that did not leave the state planned (a version refused,
    /// or another head won) makes the commitments after it stale: the tresor is committed again at the
    /// end, as before. When another device committed first, the server refuses the batch as stale: this
    /// device pulls, recomputes and pushes again, a few times.
    ///
    /// The tresors of `committingAtEnd` (a server being healed, Docs/design.md §5.2) get no commitment with
    /// their batches: each is committed to once, after the last batch, when the server holds every version.
    func push(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?, committingAtEnd: Set<UUID> = []) async throws {
        var attempts = 0
        while true {
            do {
                try await pushOutbox(&summary, progress: progress, committingAtEnd: committingAtEnd)
                return
            } catch ClientError.conflict(let message) {
                attempts += 1
                guard attempts <= SyncPolicy.staleCommitmentRetries else {
                    throw ClientError.temporary("other devices keep changing the same records (\(message)); sync again")
                }
                try await pull(&summary, progress: progress)
            }
        }
    }

    /// A batch sent and not yet acknowledged: its versions, the commitments sent with it, the answer to come.
    struct PushInFlight {
        var batch: [OutboxItem]
        var plan: [PlannedCommitment]
        var answer: Task<PushResponse, any Error>
    }

    /// The outbox's next batch after `position`, read and with its commitments planned over the state
    /// `previous` leaves, ready to send; nil when nothing is left.
    private func prepareBatch(
        after position: inout Int64,
        previous: PushInFlight?,
        committingAtEnd: Set<UUID>
    ) throws -> (batch: [OutboxItem], plan: [PlannedCommitment], body: [UInt8])? {
        let batch = Self.fitting(try store.outbox(after: position, limit: SyncPolicy.pushBatch))
        guard let last = batch.last else { return nil }
        position = last.position
        let plan = try commitmentPlan(batch, after: previous.map { ($0.batch, $0.plan) }).filter {
            !committingAtEnd.contains($0.commitment.tresorID)
        }
        return (batch, plan, try Self.pushBody(batch, commitments: plan.map(\.commitment)))
    }

    private func send(_ prepared: (batch: [OutboxItem], plan: [PlannedCommitment], body: [UInt8])) throws -> PushInFlight {
        let (transport, auth, body) = (self.transport, try self.auth, prepared.body)
        return PushInFlight(batch: prepared.batch, plan: prepared.plan, answer: Task { try await transport.push(batch: body, auth: auth) })
    }

    private func pushOutbox(
        _ summary: inout SyncSummary,
        progress: (@Sendable (SyncProgress) -> Void)?,
        committingAtEnd: Set<UUID>
    ) async throws {
        let total = try store.outboxCount()
        var done = 0
        var position: Int64 = 0
        var recommit = try store.uncommittedTresors().union(committingAtEnd)
        var inFlight = try prepareBatch(after: &position, previous: nil, committingAtEnd: committingAtEnd).map(send)
        while let current = inFlight {
            // The next batch is read and planned while the server works on this one, and goes out as soon as
            // the server answered, before this one is acknowledged; this one is acknowledged whatever becomes
            // of the next.
            let prepared = Result { try prepareBatch(after: &position, previous: current, committingAtEnd: committingAtEnd) }
            let answer = current.answer
            let response = try await withTaskCancellationHandler {
                try await answer.value
            } onCancel: {
                answer.cancel()
            }
            guard response.results.count == current.batch.count else {
                throw ClientError.integrity("the server answered a push with the wrong number of results")
            }
            // An answer that does not name the versions sent goes no further: nothing more is sent on it.
            guard zip(current.batch, response.results).allSatisfy({ $0.versionID == $1.versionID }) else {
                throw ClientError.integrity("the server acknowledged a version that was not sent")
            }
            // Cancelled: nothing more goes out, but this answer is still acknowledged (its commitment remembered).
            let cancelled = Task.isCancelled
            let next = cancelled ? .success(nil) : prepared.flatMap { p in Result { try p.map(send) } }
            let acknowledged: (rejected: [String], stale: Set<UUID>)
            do { acknowledged = try acknowledge(current.batch, response.results, plan: current.plan) } catch {
                if case let .success(sent?) = next {
                    sent.answer.cancel()
                    _ = try? await sent.answer.value
                }
                throw error
            }
            recommit.formUnion(acknowledged.stale)
            summary.pushed += response.results.filter { $0.status == .stored }.count
            summary.duplicates += response.results.filter { $0.status == .duplicate }.count
            summary.rejected += acknowledged.rejected
            done += current.batch.count
            progress?(SyncProgress(phase: .push, done: done, total: max(total, done)))
            if cancelled { throw CancellationError() }
            inFlight = try next.get()
        }
        // A version the server refused or did not make the head left its committed state different from
        // the one signed: commit again to what it holds.
        guard !recommit.isEmpty else { return }
        let plan = try commitmentPlan([], tresors: recommit)
        guard !plan.isEmpty else { return }
        _ = try await transport.push(batch: try Self.pushBody([], commitments: plan.map(\.commitment)), auth: try auth)
        _ = try acknowledge([], [], plan: plan)
    }

    /// The commitment to each tresor `batch` changes (and to each of `tresors`), signed over the state the
    /// server will hold once it stores the batch: this device's copy of the server's heads with each pushed
    /// version in place of its record's head, at the sequence after the newest commitment seen. With
    /// `previous`, a batch sent but not yet acknowledged: the state it leaves as planned, its commitments
    /// and its versions as heads are taken as done. None while records are quarantined: this device's copy
    /// then lacks their heads.
    func commitmentPlan(
        _ batch: [OutboxItem],
        tresors: Set<UUID> = [],
        after previous: (batch: [OutboxItem], plan: [PlannedCommitment])? = nil
    ) throws -> [PlannedCommitment] {
        try store.read { tx in
            guard !(try tx.quarantine.holdsAny()) else { return [] }
            var states = try ServerStates.load(tx)
            var sent: [String: HeadSet.Head] = [:]
            if let previous {
                for p in previous.plan {
                    states.sets[p.commitment.tresorID] = p.state
                    states.commitments[p.commitment.tresorID] = p.commitment
                }
                // A record edited again while its version was on the way: that version is the head to replace.
                for item in previous.batch {
                    let h = item.envelope.header
                    sent[h.recordID.hex] = HeadSet.Head(versionID: item.versionID, deleted: h.deleted, timestamp: h.timestamp)
                }
            }
            var categories: [UUID: String] = [:]
            for t in tresors { categories[t] = keyring.tresors.values.first { $0.id == t }?.category }
            for item in batch {
                let h = item.envelope.header
                let rid = h.recordID.hex
                let head = HeadSet.Head(versionID: item.versionID, deleted: h.deleted, timestamp: h.timestamp)
                do {
                    try states.sets[h.tresorID, default: HeadSet()].replace(recordID: rid, old: try sent[rid] ?? tx.serverHead(rid), with: head)
                } catch {
                    throw ClientError.localState("a record id or version id on this device is damaged")
                }
                categories[h.tresorID] = h.category
            }
            let now = self.now().unixMillis
            return try categories.sorted { $0.value < $1.value }.map { id, category in
                let state = states.sets[id] ?? HeadSet()
                let (sequence, overflow) = (states.commitments[id]?.sequence ?? 0).addingReportingOverflow(1)
                guard !overflow else { throw ClientError.integrity("the state commitment of \(category) is at the last sequence number") }
                let commitment = StateCommitment.make(
                    patient: account.identity,
                    tresorID: id,
                    category: category,
                    sequence: sequence,
                    state: state,
                    topEpoch: keyring[category]?.currentEpoch ?? 0,
                    tresorVersion: try tx.ledgerState(category: category)?.seenVersion ?? 0,
                    committedAt: now
                )
                return PlannedCommitment(commitment: commitment, state: state)
            }
        }
    }

    /// A binary batch (Docs/envelope-v1.md §7.2) of the envelopes as stored, with the commitments.
    static func pushBody(_ batch: [OutboxItem], commitments: [StateCommitment] = []) throws -> [UInt8] {
        do { return try EnvelopeFrame.encode(binaries: batch.map { Array($0.bytes) }, commitments: commitments) } catch {
            throw ClientError.localState("the versions waiting to be sent do not fit in one push: \(error)")
        }
    }

    /// The longest prefix of `items` (at least one) whose batch stays within the byte limit of a push, with
    /// room left for the commitments: a few records near the largest size would otherwise pass it.
    static func fitting(_ items: [OutboxItem]) -> [OutboxItem] {
        let budget = EnvelopeFrame.maxBytes - 1024 * 1024
        var total = 12
        for (i, item) in items.enumerated() {
            total += 4 + item.bytes.count
            if total > budget { return Array(items.prefix(max(i, 1))) }
        }
        return items
    }

    /// Removes acknowledged versions from the outbox and records refused ones, notes the versions that
    /// became the server's heads and remembers the commitments the server stored with them, in one
    /// transaction. Returns the refusals, and the tresors whose committed state is not what the server now
    /// holds (a version was refused, or another head won).
    func acknowledge(_ batch: [OutboxItem], _ results: [PushResult], plan: [PlannedCommitment] = []) throws -> ([String], Set<UUID>) {
        try store.write { tx in
            var rejected: [String] = []
            var states = try ServerStates.load(tx)
            var kept: [(item: OutboxItem, head: Bool)] = []
            for (item, result) in zip(batch, results) {
                guard result.versionID == item.versionID else {
                    throw ClientError.integrity("the server acknowledged a version that was not sent")
                }
                switch result.status {
                case .stored, .duplicate:
                    // A duplicate is taken as the head, as the commitment took it: it was this device's
                    // newest version of the record, and a newer head from elsewhere would have come with a
                    // newer commitment that made this push stale.
                    kept.append((item, result.status == .duplicate || result.sequence != nil))
                case .rejected:
                    let reason = "\(result.code?.rawValue ?? "rejected"): \(result.reason ?? "no reason given")"
                    try tx.reject(item, reason: reason, at: Date().unixMillis)
                    rejected.append(reason)
                }
            }
            try states.acknowledge(kept, tx)
            var stale = Set<UUID>()
            for p in plan {
                states.remember(p.commitment)
                let matches = states.sets[p.commitment.tresorID] ?? HeadSet() == p.state
                if !matches { stale.insert(p.commitment.tresorID) }
                states.setUncommitted(p.commitment.tresorID, !matches)
            }
            let committed = Set(plan.map(\.commitment.tresorID))
            for (item, result) in zip(batch, results) where result.status != .rejected && !committed.contains(item.envelope.header.tresorID) {
                states.setUncommitted(item.envelope.header.tresorID, true)
            }
            try states.save(tx)
            return (rejected, stale)
        }
    }
}
