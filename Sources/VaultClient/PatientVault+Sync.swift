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
    /// Approved shares whose keys this sync sealed to the doctor, each "CATEGORY to USERNAME".
    public var keysDelivered: [String] = []
    /// What this device told the patient when it found the server behind what it last saw and re-sent
    /// its versions (Docs/design.md §5.2), one line per tresor.
    public var healed: [String] = []
    /// An empty summary.
    public init() {}
}

/// Sync progress for a progress bar: phase, items done, items known so far.
public struct SyncProgress: Sendable {
    /// What the sync is doing.
    public enum Phase: String, Sendable { case keys, push, pull, heal }
    /// The current phase.
    public var phase: Phase
    /// Items done in this phase.
    public var done: Int
    /// Items known so far in this phase, when known.
    public var total: Int?
    /// What the patient must be told now, in plain words (the heal of a server that is behind).
    public var note: String? = nil
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
        // Another process on this home (a `log` beside a `sync --watch`) may have changed the keys.
        try reloadKeyring()
        // A server behind this device's key declarations (a restored backup) gets them again first.
        summary.healed += try await reconcileTresors()
        // Keys to approved doctors, new epochs past expired ones: before anything is written or pushed.
        summary.keysDelivered = try await maintainShares()
        // After the keys: a record quarantined for a key this device lacked may open now.
        try await retryQuarantined(&summary)
        // Pull first: a concurrent outcome is merged with the unsent local copy before that copy is pushed.
        let behind = try await pull(&summary, progress: progress, allowingBehind: true)
        // A server behind what this device accepted (a restored backup) gets this device's versions again.
        let healing = behind.isEmpty ? [] : try await heal(behind, &summary, progress: progress)
        try await push(&summary, progress: progress, committingAtEnd: healing)
        // Once per sync: a server still behind after the heal is an integrity failure.
        if !behind.isEmpty { try await pull(&summary, progress: progress) }
        summary.quarantined = try store.quarantined()
        return summary
    }

    /// This device's replica of the patient's own records: every tresor, one cursor, merged with the local copy.
    var replica: ReplicaEngine<PatientReplica> {
        get throws { try replica(healing: false) }
    }

    /// The replica engine; `healing` skips the pulled heads older than what the server showed before
    /// (Docs/design.md §5.2) instead of holding them aside as replays.
    func replica(healing: Bool) throws -> ReplicaEngine<PatientReplica> {
        ReplicaEngine(feed: ReplicaFeed(owner: me), applier: PatientReplica(vault: self, healing: healing), transport: transport, auth: try auth)
    }

    /// Pulls pages until the server says it sent everything, then checks the newest state commitments
    /// that final page carried against this device's copy of the server's heads (Docs/envelope-v1.md §3.4):
    /// in the transaction that applies that page; what is wrong is thrown once that transaction is kept.
    /// With `allowingBehind`, the tresors whose server is behind the state this device accepted
    /// (Docs/design.md §5.2) are returned instead of thrown, when nothing else is wrong.
    @discardableResult
    func pull(
        _ summary: inout SyncSummary,
        progress: (@Sendable (SyncProgress) -> Void)?,
        allowingBehind: Bool = false
    ) async throws -> [ServerBehind] {
        let before = summary.pulled
        let pulled = try await replica.pull { n in progress?(SyncProgress(phase: .pull, done: before + n, total: nil)) }
        summary.conflictsResolved += pulled.resolved
        // A device's own pushes come back with the next pull: they are not news to report.
        summary.pulled += pulled.pulled - pulled.echoes
        if allowingBehind, !pulled.behind.isEmpty, pulled.problems.count == pulled.behind.count { return pulled.behind }
        guard pulled.problems.isEmpty else { throw ClientError.integrity(pulled.problems.joined(separator: "; ")) }
        return []
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
    /// it resolved, what is wrong with the commitments in plain words (the caller throws it), with the
    /// tresors whose server is behind among them, and how many changes were already this device's copy byte
    /// for byte (its own pushes coming back). `healing`: a pulled head older than the one the server
    /// showed before is what a restored server brought back; it is skipped, not held aside as a replay
    /// (Docs/design.md §5.2).
    func apply(
        _ changes: [PulledChange],
        release: [UInt64],
        cursor: UInt64?,
        commitments: [StateCommitment]? = nil,
        healing: Bool = false
    ) throws -> (resolved: Int, problems: [String], behind: [ServerBehind], echoes: Int) {
        let tresors = commitments.map(committedTresors) ?? [:]
        let signatures = SignatureCheck.current
        let merge = PulledVersionMerge(
            ownerID: me,
            identity: account.identity,
            certificate: account.certificate,
            keyring: keyring,
            wallClockMs: wallClockMs,
            signatures: signatures
        )
        return try store.write(deviceID: account.profile.deviceID) { tx, clock in
            var resolved = 0
            var echoes = 0
            var states = try ServerStates.load(tx)
            let quarantine = tx.quarantine
            for sequence in release { try quarantine.release(sequence: sequence) }
            var anyHeld = try quarantine.holdsAny()
            // The tresors whose records the final page's commitments authenticate (Docs/commitment-pages.md).
            let vouched = try commitments.map {
                try states.vouched(changes, shown: $0, tresors: tresors, patient: account.certificate, signatures: signatures, tx)
            }
            for change in changes {
                do {
                    guard let env = change.envelope else { throw QuarantineError(reason: .malformed) }
                    if let local = try tx.record(env.header.recordID.hex), local.envelope.versionID == env.versionID { echoes += 1 }
                    if try merge.merge(env, tx, &clock, vouched: vouched?.contains(env.header.tresorID) == true) { resolved += 1 }
                    // Applied or kept local, it is the server's head of its record now.
                    try states.setServerHead(env, tx)
                    // A verified version heals its record: older quarantined versions of it are superseded.
                    if anyHeld {
                        try quarantine.release(sequence: change.sequence)
                        try quarantine.release(recordID: env.header.recordID.hex)
                    }
                } catch let failure as QuarantineError where healing && failure.reason == .replayed {
                    // The device keeps its newer version, and re-sends it: an older one held aside before is moot.
                    if anyHeld { try quarantine.release(sequence: change.sequence) }
                    continue
                } catch let failure as QuarantineError {
                    // A signed record under an epoch this device lacks proves that epoch exists: never write below it.
                    if failure.reason == .missingEpochKey, let env = change.envelope {
                        try tx.raiseTopEpoch(env.header.epoch, category: env.header.category, tresorID: env.header.tresorID)
                    }
                    try quarantine.hold(change.quarantined(failure.reason))
                    anyHeld = true
                }
            }
            if let cursor { try tx.setCursor(cursor) }
            var verdict = CommitmentReview.Verdict()
            if let commitments {
                verdict = states.verdict(
                    commitments,
                    patient: account.certificate,
                    tresors: tresors,
                    skipping: try tx.quarantinedTresors(among: Set(tresors.keys))
                )
            }
            try states.save(tx)
            return (resolved, verdict.problems, verdict.behind, echoes)
        }
    }
}

extension PatientVault {
    /// The records from the server this device keeps aside (Docs/design.md §5), by sequence.
    public func quarantined() throws -> [QuarantinedRecord] {
        try store.quarantined()
    }

    /// Fetches the quarantined records again and applies those that now verify; a sequence that holds
    /// no change any more leaves quarantine (the record's newer head comes with the regular pull).
    func retryQuarantined(_ summary: inout SyncSummary) async throws {
        summary.conflictsResolved += try await replica.retryQuarantined()
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

/// The patient's side of the replica engine: pulled versions are opened and merged with the local copy in
/// the transaction that stores them (they need the local copy), so `verify` passes them on as they are.
struct PatientReplica: ReplicaApplier {
    let vault: PatientVault
    var healing = false

    func cursor() async throws -> UInt64 { try vault.store.cursor() }
    func quarantined() async throws -> [QuarantinedRecord] { try vault.store.quarantined() }
    func verify(_ changes: [PulledChange]) async throws -> [PulledChange] { changes }

    func store(_ verified: [PulledChange], release: [UInt64], cursor: UInt64?, commitments: [StateCommitment]?) async throws -> ReplicaStored {
        let (resolved, problems, behind, echoes) = try await vault.apply(
            verified,
            release: release,
            cursor: cursor,
            commitments: commitments,
            healing: healing
        )
        return ReplicaStored(resolved: resolved, problems: problems, behind: behind, echoes: echoes)
    }
}

/// What applying pulled versions needs of the vault, taken once per page: every version is opened and
/// checked against the device's own keys and certificate, then reconciled with the local copy
/// (`Reconciliation.resolve`, Docs/design.md §5).
struct PulledVersionMerge {
    let ownerID: UUID
    let identity: Identity
    let certificate: Certificate
    let keyring: Keyring
    let wallClockMs: UInt64
    let signatures: SignatureCheck

    /// Merges one pulled version in the page's transaction; true when it resolved a conflict. A version
    /// that fails a check of its own throws `QuarantineError` before anything of it is written. A version
    /// `vouched` for by a state commitment the device verified (Docs/commitment-pages.md) gets every check
    /// but its signature.
    func merge(_ env: Envelope, _ tx: LocalStore.Transaction, _ clock: inout HybridLogicalClock, vouched: Bool = false) throws -> Bool {
        guard let t = keyring[env.header.category], t.id == env.header.tresorID else { throw QuarantineError(reason: .wrongContext) }
        let context = EnvelopeContext(ownerID: ownerID, tresorID: t.id, category: t.category)
        let theirs: CareRecord?
        do {
            if vouched {
                theirs = try env.openRecordVerifiedEarlier(keys: t.keys, expecting: context).record
            } else {
                theirs = try signatures.openRecord(env, keys: t.keys, authorKey: certificate.signingKey, context: context).record
            }
        } catch {
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
                mine = try signatures.openRecord(local.envelope, keys: t.keys, authorKey: certificate.signingKey, context: context).record?.asOutcome
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
            try tx.advanceServerTimestamp(rid, env.header.timestamp)
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
            try tx.advanceServerTimestamp(rid, env.header.timestamp)
            return true
        }
    }
}
