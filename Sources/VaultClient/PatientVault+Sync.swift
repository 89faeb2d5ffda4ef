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

    /// Pushes the outbox in batches, two in flight: while the server verifies and stores one batch, this
    /// device reads the next and acknowledges the previous, so both sides work at once. The batches hold
    /// different records (one outbox entry per record), so their order at the server does not matter;
    /// each batch is acknowledged in its own transaction, and an interrupted push leaves the unacknowledged
    /// batches queued (the server answers a repeat as a duplicate).
    func push(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws {
        let total = try store.outboxCount()
        var done = 0
        var position: Int64 = 0
        var inFlight: (batch: [OutboxItem], answer: Task<PushResponse, any Error>)?
        defer { inFlight?.answer.cancel() }
        let auth = try self.auth
        while true {
            let batch = try store.outbox(after: position, limit: SyncPolicy.pushBatch)
            var next: (batch: [OutboxItem], answer: Task<PushResponse, any Error>)?
            if let last = batch.last {
                position = last.position
                let body = Self.pushBody(batch)
                let transport = self.transport
                next = (batch, Task { try await transport.send(.POST, Routes.records, json: body, auth: auth) })
            }
            if let (previous, answer) = inFlight {
                inFlight = nil
                let response: PushResponse
                do { response = try await answer.value } catch {
                    next?.answer.cancel()
                    throw error
                }
                guard response.results.count == previous.count else {
                    throw ClientError.integrity("the server answered a push with the wrong number of results")
                }
                let rejected = try acknowledge(previous, response.results)
                summary.pushed += response.results.filter { $0.status == .stored }.count
                summary.duplicates += response.results.filter { $0.status == .duplicate }.count
                summary.rejected += rejected
                done += previous.count
                progress?(SyncProgress(phase: .push, done: done, total: max(total, done)))
            }
            guard let next else { return }
            inFlight = next
        }
    }

    /// A push request made of the envelopes' stored JSON: `{"envelopes":[…]}`.
    static func pushBody(_ batch: [OutboxItem]) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(batch.reduce(32) { $0 + $1.json.count + 1 })
        body.append(contentsOf: #"{"envelopes":["#.utf8)
        for (i, item) in batch.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: item.json)
        }
        body.append(contentsOf: "]}".utf8)
        return body
    }

    /// Removes acknowledged versions from the outbox and records refused ones, in one transaction.
    func acknowledge(_ batch: [OutboxItem], _ results: [PushResult]) throws -> [String] {
        try store.write { tx in
            var rejected: [String] = []
            for (item, result) in zip(batch, results) {
                guard result.versionID == item.versionID else {
                    throw ClientError.integrity("the server acknowledged a version that was not sent")
                }
                switch result.status {
                case .stored, .duplicate:
                    try tx.acknowledge(item)
                case .rejected:
                    let reason = "\(result.code?.rawValue ?? "rejected"): \(result.reason ?? "no reason given")"
                    try tx.reject(item, reason: reason, at: Date().unixMillis)
                    rejected.append(reason)
                }
            }
            return rejected
        }
    }

    func pull(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws {
        var cursor = try store.cursor()
        while true {
            let query = "?since=\(cursor)&limit=\(SyncPolicy.pullPage)"
            let page = try PulledPage.parse(try await transport.sendForJSONBytes(.GET, Routes.records + query, auth: try auth), after: cursor)
            summary.conflictsResolved += try apply(page.changes, release: [], cursor: page.changes.last?.sequence ?? cursor)
            summary.pulled += page.changes.count
            progress?(SyncProgress(phase: .pull, done: summary.pulled, total: nil))
            if page.changes.isEmpty || page.done { return }
            cursor = page.nextCursor
        }
    }

    /// Verifies and applies pulled changes, quarantines those that fail their own checks, releases the
    /// quarantine of the sequences in `release`, and moves the cursor to `cursor` when given, in one
    /// transaction. Returns how many conflicts it resolved.
    func apply(_ changes: [PulledChange], release: [UInt64], cursor: UInt64?) throws -> Int {
        let pulled = PulledVersions(
            ownerID: me,
            identity: account.identity,
            certificate: account.certificate,
            keyring: keyring,
            wallClockMs: wallClockMs
        )
        return try store.write(deviceID: account.profile.deviceID) { tx, clock in
            var resolved = 0
            for sequence in release { try tx.release(sequence: sequence) }
            var anyHeld = try tx.holdsQuarantine()
            for change in changes {
                do {
                    guard let env = change.envelope else { throw QuarantineError(reason: .malformed) }
                    if try pulled.apply(env, tx, &clock) { resolved += 1 }
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
            return resolved
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
