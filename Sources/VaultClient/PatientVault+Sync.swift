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

    /// Pushes the outbox in batches, then pulls pages until done (Docs/design.md §5). Safe to interrupt at
    /// any point: the outbox entry goes only when the server acknowledged it, and a pulled page is
    /// applied together with the cursor advance.
    public func sync(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws -> SyncSummary {
        var summary = SyncSummary()
        progress?(SyncProgress(phase: .keys, done: 0, total: nil))
        try await reconcileTresors()
        // Pull first: a concurrent outcome is merged with the unsent local copy before that copy is pushed.
        try await pull(&summary, progress: progress)
        try await push(&summary, progress: progress)
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
            let page: PullResponse = try await transport.send(.GET, Routes.records + query, auth: try auth)
            let merged = try apply(page, after: cursor)
            summary.conflictsResolved += merged
            summary.pulled += page.changes.count
            progress?(SyncProgress(phase: .pull, done: summary.pulled, total: nil))
            if page.changes.isEmpty || page.done { return }
            cursor = page.nextCursor
        }
    }

    /// Verifies and applies one page and advances the cursor, in one transaction: any integrity failure
    /// applies nothing. Returns how many conflicts it resolved.
    func apply(_ page: PullResponse, after cursor: UInt64) throws -> Int {
        guard page.changes.allSatisfy({ $0.sequence > cursor }), page.nextCursor >= cursor,
            zip(page.changes, page.changes.dropFirst()).allSatisfy({ $0.sequence < $1.sequence })
        else { throw ClientError.integrity("the server sent changes out of order") }
        let pulled = PulledVersions(
            ownerID: me,
            identity: account.identity,
            certificate: account.certificate,
            keyring: keyring,
            wallClockMs: wallClockMs
        )
        return try store.write(deviceID: account.profile.deviceID) { tx, clock in
            var resolved = 0
            for change in page.changes where try pulled.apply(change.envelope, tx, &clock) {
                resolved += 1
            }
            try tx.setCursor(page.changes.last?.sequence ?? cursor)
            return resolved
        }
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

    /// Applies one pulled version in the page's transaction; true when it resolved a conflict.
    func apply(_ env: Envelope, _ tx: LocalStore.Transaction, _ clock: inout HybridLogicalClock) throws -> Bool {
        guard let t = keyring[env.header.category], t.id == env.header.tresorID else {
            throw ClientError.integrity("a pulled record names a tresor this account does not have")
        }
        let context = EnvelopeContext(ownerID: ownerID, tresorID: t.id, category: t.category)
        let theirs = try open(env, t, context)
        let rid = env.header.recordID.hex
        let local = try tx.record(rid)
        // The server's head only moves forward: an older version than it showed before is a replay.
        if let seen = local?.serverTimestamp, env.header.timestamp < seen {
            throw ClientError.integrity("the server replayed an older version of a record (\(env.header.timestamp) after \(seen))")
        }
        do { _ = try clock.receive(env.header.timestamp, wallClockMs: wallClockMs) } catch {
            throw ClientError.integrity("a pulled record's clock is too far in the future: \(error)")
        }
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

    /// Opens a version of this owner's record (signed by the owner's device key) under the tresor's keys.
    private func open(_ env: Envelope, _ t: Tresor, _ context: EnvelopeContext) throws -> CareRecord? {
        do { return try env.openRecord(keys: t.keys, authorKey: certificate.signingKey, expecting: context).record } catch {
            throw ClientError.from(error)
        }
    }
}
