import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// What one sync did.
public struct SyncSummary: Sendable, Equatable, Codable {
    /// Versions the server stored.
    public var pushed = 0
    /// Versions the server already had (a repeated push).
    public var duplicates = 0
    /// Changes pulled.
    public var pulled = 0
    /// Concurrent outcome copies merged, and local unsent versions that lost to a newer remote one.
    public var conflictsResolved = 0
    /// Versions the server refused, with its reasons.
    public var rejected: [String] = []
    /// Records from the server that failed their integrity check and wait in quarantine after this sync.
    public var quarantined: [QuarantinedRecord] = []
    /// An empty summary.
    public init() {}
}

/// Sync progress for a progress bar: phase, items done, items known so far.
public struct SyncProgress: Sendable {
    /// What the sync is doing.
    public enum Phase: String, Sendable { case keys, push, pull }
    /// The current phase.
    public var phase: Phase
    /// Items done in this phase.
    public var done: Int
    /// Items known so far in this phase, when known.
    public var total: Int?
}

extension PatientVault {
    // MARK: Sync

    /// Retries the quarantined records, pulls pages until done and pushes the outbox (Docs/design.md §5).
    /// Safe to interrupt at any point: the outbox entry goes only when the server acknowledged it, and a
    /// pulled page is applied together with the cursor advance. A record that fails its integrity check
    /// is quarantined and the rest goes on; then this throws an integrity failure naming how many and why.
    public func sync(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws -> SyncSummary {
        let summary = try await syncKeepingQuarantine(progress: progress)
        if let message = summary.quarantineMessage { throw ClientError.integrity(message) }
        return summary
    }

    /// `sync`, with the records still in quarantine listed in the summary instead of thrown.
    public func syncKeepingQuarantine(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws -> SyncSummary {
        var summary = SyncSummary()
        progress?(SyncProgress(phase: .keys, done: 0, total: nil))
        try await reconcileTresors()
        // Keys to approved doctors, new epochs past expired ones: before anything is written or pushed.
        try await maintainShares()
        // After the keys: a record quarantined for a key this device lacked may open now.
        try await retryQuarantined(&summary)
        // Pull first: a concurrent outcome is merged with the unsent local copy before that copy is pushed.
        try await pull(&summary, progress: progress)
        try await push(&summary, progress: progress)
        summary.quarantined = try store.quarantined()
        return summary
    }

    /// Pushes the outbox in batches, one at a time, each with the patient's commitment to every tresor it
    /// changes (Docs/envelope-v1.md §3.4): the state after the batch is known only once the batch before
    /// it is acknowledged, and commitments of one tresor must reach the server in order. Each batch is
    /// acknowledged in its own transaction, and an interrupted push leaves the unacknowledged batches
    /// queued (the server answers a repeat as a duplicate). When another device committed first, the
    /// server refuses the batch as stale: this device pulls, recomputes and pushes again, a few times.
    func push(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws {
        var attempts = 0
        while true {
            do {
                try await pushOutbox(&summary, progress: progress)
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

    private func pushOutbox(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws {
        let total = try store.outboxCount()
        var done = 0
        var position: Int64 = 0
        var recommit = try store.uncommittedTresors()
        while true {
            let batch = Self.fitting(try store.outbox(after: position, limit: SyncPolicy.pushBatch))
            guard let last = batch.last else { break }
            position = last.position
            let plan = try commitmentPlan(batch)
            let response = try await transport.push(batch: try Self.pushBody(batch, commitments: plan.map(\.commitment)), auth: try auth)
            guard response.results.count == batch.count else {
                throw ClientError.integrity("the server answered a push with the wrong number of results")
            }
            let (rejected, stale) = try acknowledge(batch, response.results, plan: plan)
            recommit.formUnion(stale)
            summary.pushed += response.results.filter { $0.status == .stored }.count
            summary.duplicates += response.results.filter { $0.status == .duplicate }.count
            summary.rejected += rejected
            done += batch.count
            progress?(SyncProgress(phase: .push, done: done, total: max(total, done)))
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
    /// version in place of its record's head, at the sequence after the newest commitment seen. None while
    /// records are quarantined: this device's copy then lacks their heads.
    func commitmentPlan(_ batch: [OutboxItem], tresors: Set<UUID> = []) throws -> [PlannedCommitment] {
        try store.read { tx in
            guard !(try tx.holdsQuarantine()) else { return [] }
            var states = try ServerStates.load(tx)
            var categories: [UUID: String] = [:]
            for t in tresors { categories[t] = keyring.tresors.values.first { $0.id == t }?.category }
            for item in batch {
                let h = item.envelope.header
                let head = HeadSet.Head(versionID: item.versionID, deleted: h.deleted, timestamp: h.timestamp)
                do {
                    try states.sets[h.tresorID, default: HeadSet()].replace(
                        recordID: h.recordID.hex,
                        old: try tx.serverHead(h.recordID.hex),
                        with: head
                    )
                } catch {
                    throw ClientError.localState("a record id or version id on this device is damaged")
                }
                categories[h.tresorID] = h.category
            }
            let now = self.now().unixMillis
            return try categories.sorted { $0.value < $1.value }.map { id, category in
                let state = states.sets[id] ?? HeadSet()
                let commitment = StateCommitment.make(
                    patient: account.identity,
                    tresorID: id,
                    category: category,
                    sequence: (states.commitments[id]?.sequence ?? 0) &+ 1,
                    state: state,
                    topEpoch: keyring[category]?.currentEpoch ?? 0,
                    tresorVersion: try tx.marks(category: category)?.seenVersion ?? 0,
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
            for (item, result) in zip(batch, results) {
                guard result.versionID == item.versionID else {
                    throw ClientError.integrity("the server acknowledged a version that was not sent")
                }
                switch result.status {
                case .stored, .duplicate:
                    try tx.acknowledge(item)
                    // A duplicate is taken as the head, as the commitment took it: it was this device's
                    // newest version of the record, and a newer head from elsewhere would have come with a
                    // newer commitment that made this push stale.
                    if result.status == .duplicate || result.sequence != nil { try states.note(item.envelope, versionID: item.versionID, tx) }
                case .rejected:
                    let reason = "\(result.code?.rawValue ?? "rejected"): \(result.reason ?? "no reason given")"
                    try tx.reject(item, reason: reason, at: Date().unixMillis)
                    rejected.append(reason)
                }
            }
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

    /// Pulls pages until the server says it sent everything, then checks the newest state commitments
    /// that final page carried against this device's copy of the server's heads (Docs/envelope-v1.md §3.4).
    func pull(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws {
        var cursor = try store.cursor()
        while true {
            let query = "?since=\(cursor)&limit=\(SyncPolicy.pullPage)"
            let (page, commitments) = try await transport.pullPage(query: query, after: cursor, auth: try auth)
            // The final page's commitments are checked in the transaction that applies it, against the copy
            // of the server's heads it leaves; what is wrong is thrown once that transaction is kept.
            let (resolved, problems) = try apply(
                page.changes,
                release: [],
                cursor: page.changes.last?.sequence ?? cursor,
                commitments: page.done ? commitments : nil
            )
            summary.conflictsResolved += resolved
            summary.pulled += page.changes.count
            progress?(SyncProgress(phase: .pull, done: summary.pulled, total: nil))
            if page.done {
                guard problems.isEmpty else { throw ClientError.integrity(problems.joined(separator: "; ")) }
                return
            }
            // An honest server ends with a page that says so; an empty page that does not is a way to skip the check.
            if page.changes.isEmpty { throw ClientError.integrity("the server stopped sending changes without saying it sent them all") }
            cursor = page.nextCursor
        }
    }

    /// The patient's tresors by id, for checking the commitments `shown`: those the keyring holds, and any
    /// the device has no keys for yet that are still this patient's (their ids are derived).
    func committedTresors(_ shown: [StateCommitment]) -> [UUID: String] {
        var tresors = Dictionary(keyring.tresors.values.map { ($0.id, $0.category) }) { a, _ in a }
        for c in shown where Tresor.id(ownerID: me, category: c.category) == c.tresorID { tresors[c.tresorID] = c.category }
        return tresors
    }

    /// Verifies and applies pulled changes, quarantines those that fail their own checks, releases the
    /// quarantine of the sequences in `release`, and moves the cursor to `cursor` when given, in one
    /// transaction. With `commitments` (the final page's), then checks them against the copy of the
    /// server's heads and remembers those that hold (Docs/envelope-v1.md §3.4). Returns how many conflicts
    /// it resolved, and what is wrong with the commitments in plain words (the caller throws it).
    func apply(
        _ changes: [PulledChange],
        release: [UInt64],
        cursor: UInt64?,
        commitments: [StateCommitment]? = nil
    ) throws -> (resolved: Int, problems: [String]) {
        let tresors = commitments.map(committedTresors) ?? [:]
        let pulled = PulledVersions(
            ownerID: me,
            identity: account.identity,
            certificate: account.certificate,
            keyring: keyring,
            wallClockMs: wallClockMs
        )
        return try store.write(deviceID: account.profile.deviceID) { tx, clock in
            var resolved = 0
            var states = try ServerStates.load(tx)
            for sequence in release { try tx.release(sequence: sequence) }
            var anyHeld = try tx.holdsQuarantine()
            for change in changes {
                do {
                    guard let env = change.envelope else { throw QuarantineError(reason: .malformed) }
                    if try pulled.apply(env, tx, &clock) { resolved += 1 }
                    // Applied or kept local, it is the server's head of its record now.
                    try states.note(env, tx)
                    // A verified version heals its record: older quarantined versions of it are superseded.
                    if anyHeld { try tx.release(sequence: change.sequence, recordID: env.header.recordID.hex) }
                } catch let failure as QuarantineError {
                    // A signed record under an epoch this device lacks proves that epoch exists: never write below it.
                    if failure.reason == .missingEpochKey, let env = change.envelope {
                        try tx.noteEpoch(env.header.epoch, category: env.header.category, tresorID: env.header.tresorID)
                    }
                    try tx.quarantine(change.quarantined(failure.reason))
                    anyHeld = true
                }
            }
            if let cursor { try tx.setCursor(cursor) }
            var problems: [String] = []
            if let commitments {
                problems = states.check(
                    commitments,
                    patient: account.certificate,
                    tresors: tresors,
                    skipping: try tx.quarantinedTresors(among: Set(tresors.keys))
                )
            }
            try states.save(tx)
            return (resolved, problems)
        }
    }
}

extension SyncSummary {
    /// The message that names the quarantined records and their reasons, or nil when there are none.
    public var quarantineMessage: String? {
        QuarantinedRecord.message(
            quarantined,
            subject: "from the server",
            notDone: "applied",
            hint: "; run `carevault-patient sync --verbose` for their ids"
        )
    }
}

/// What applying pulled versions needs of the vault, taken once per page: every version is opened and
/// checked against the device's own keys and certificate, then reconciled with the local copy
/// (`Reconciliation.resolve`, Docs/design.md §5).
struct PulledVersions {
    let ownerID: UUID
    let identity: Identity
    let certificate: Certificate
    let keyring: Keyring
    let wallClockMs: UInt64

    /// Applies one pulled version in the page's transaction; true when it resolved a conflict. A version
    /// that fails a check of its own throws `QuarantineError` before anything of it is written.
    func apply(_ env: Envelope, _ tx: LocalStore.Transaction, _ clock: inout HybridLogicalClock) throws -> Bool {
        guard let t = keyring[env.header.category], t.id == env.header.tresorID else { throw QuarantineError(reason: .wrongContext) }
        let context = EnvelopeContext(ownerID: ownerID, tresorID: t.id, category: t.category)
        let theirs: CareRecord?
        do { theirs = try env.openRecord(keys: t.keys, authorKey: certificate.signingKey, expecting: context).record } catch {
            throw QuarantineError(reason: QuarantineReason(error))
        }
        let rid = env.header.recordID.hex
        let local = try tx.record(rid)
        // The server's head only moves forward: an older version than it showed before is a replay.
        if let seen = local?.serverTimestamp, env.header.timestamp < seen { throw QuarantineError(reason: .replayed) }
        // `receive` checks before it changes the clock, so a refused timestamp leaves the clock as it was.
        do { _ = try clock.receive(env.header.timestamp, wallClockMs: wallClockMs) } catch { throw QuarantineError(reason: .clockOutOfRange) }
        let copy: LocalCopy? = try local.map { local in
            var mine: Outcome?
            if local.recordType == .outcome, !local.deleted {
                mine = try local.envelope.openRecord(keys: t.keys, authorKey: certificate.signingKey, expecting: context).record?.asOutcome
            }
            return LocalCopy(timestamp: local.timestamp, deleted: local.deleted, pending: local.pending, outcome: mine)
        }
        let remote = Versioned(timestamp: env.header.timestamp, deleted: env.header.deleted, payload: theirs?.asOutcome)
        switch Reconciliation.resolve(local: copy, remote: remote) {
        case let .adoptRemote(dropOutbox):
            if dropOutbox { try tx.dropOutbox(recordID: rid) }
            try tx.put(env, outbox: false, serverTimestamp: env.header.timestamp)
            return dropOutbox
        case .keepLocal:
            try tx.noteServerIfNewer(rid, env.header.timestamp)
            return false
        case let .writeMerged(merged):
            // Outcome values are a set: merged, so no device's readings are lost, whether the local
            // copy is unsent or was sent but lost at the server.
            var header = env.header
            header.timestamp = try clock.tick(wallClockMs: wallClockMs)
            header.epoch = t.currentEpoch
            try tx.put(
                try Envelope.seal(record: .outcome(merged), type: .outcome, header: header, key: t.currentKey, author: identity.signing),
                outbox: true
            )
            try tx.noteServerIfNewer(rid, env.header.timestamp)
            return true
        }
    }
}
