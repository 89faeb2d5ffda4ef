import Foundation
import VaultCore
import VaultCrypto

/// The doctor's side of the replica engine: one shared tresor of one patient, each change verified on its
/// own (`SharedRecordCheck`) and kept in the cache as the envelope the server sent.
struct SharedReplica: ReplicaApplier {
    let cache: DoctorCache
    let patient: Certificate
    let share: VerifiedShare
    /// Told of the changes each store kept in the cache (verified, not held aside), for `watch`.
    var applied: (@Sendable ([DoctorCache.Entry]) async throws -> Void)? = nil
    /// The pages of the pull under way before its final one, held in memory within a budget.
    let held = HeldPages()
    /// Where the records opened by the checks are kept for the view that follows (none when not viewing).
    var opened: OpenedRecords? = nil

    var tresor: UUID { share.tresor.id }
    var category: String { share.share.category }
    /// The checks of the share's changes: its context, the patient's signing key, the keys granted.
    var checks: SharedRecordCheck { checks(.current) }

    /// The checks of the share's changes, with their signatures checked as `signatures` says.
    func checks(_ signatures: SignatureCheck) -> SharedRecordCheck {
        SharedRecordCheck(
            context: EnvelopeContext(ownerID: patient.userID, tresorID: tresor, category: category),
            signingKey: patient.signingKey,
            keys: share.tresor.keys,
            signatures: signatures,
            opened: opened
        )
    }

    func cursor() async throws -> UInt64 { try await cache.cursor(owner: patient.userID, tresor: tresor) }
    func quarantined() async throws -> [QuarantinedRecord] { try await cache.quarantined(owner: patient.userID, tresor: tresor) }
    func verify(_ changes: [PulledChange]) async throws -> SharedPage { SharedPage(items: try await checks.run(changes), mode: .checked) }

    /// A page before the final one: every check but the signature, to be held pending until the final
    /// page's commitment is seen (Docs/commitment-pages.md §8); every check when held to the old path.
    func verifyAhead(_ changes: [PulledChange]) async throws -> SharedPage {
        let signatures = SignatureCheck.current
        guard !signatures.perRecordOnly else { return SharedPage(items: try await checks(signatures).run(changes), mode: .checked) }
        let page = SharedPage(items: try await checks(signatures).run(changes, deferringSignatures: true), mode: .staged)
        // A page written pending is summed in the final store's transaction, unless it is parked (records large
        // enough, DoctorCache.parkingEnvelopeBytes): the parked set takes its sum.
        return held.spilled && !(applied == nil && DoctorCache.largeEnoughToPark(page.entries)) ? page : await page.summed()
    }

    func store(_ page: SharedPage, release: [UInt64], cursor: UInt64?, commitments: [StateCommitment]?) async throws -> ReplicaStored {
        let owner = patient.userID
        var stored: [DoctorCache.Entry] = []
        switch page.mode {
        case .staged:
            // Refused here as the cache would refuse it when written: a page held in memory stops the pull as
            // early as one written pending (a sequence the cache cannot keep).
            for sequence in page.items.map(\.sequence) + (cursor.map { [$0] } ?? []) { _ = try DoctorCache.storedCursor(sequence) }
            // Written pending (with the page's cursor) only past the budget of what a pull holds in memory.
            // A first read parks them among the heads, unless `watch` is to be told of them when they are stored.
            if let spilled = held.add(page.items, added: page.added) {
                try await cache.stage(spilled.items, added: spilled.added, owner: owner, tresor: tresor, cursor: cursor, parking: applied == nil)
            }
        case let .candidate(shown):
            let entries = page.entries
            let (earlier, earlierAdded) = held.drain()
            if release.isEmpty,
                let promoted = try await cache.storeIfVouched(
                    earlier + entries,
                    added: earlierAdded.flatMap { sum in page.added.map(sum.adding) },
                    shown: shown,
                    patient: patient,
                    tresor: tresor,
                    category: category,
                    cursor: cursor,
                    collect: applied != nil
                )
            {
                stored = promoted + earlier + entries
            } else {
                // Not authenticated by the commitment: every record on its own, those held pending first.
                stored = try await checkPending(earlier)
                let checked = try await checkSignatures(entries)
                try await cache.store(checked, release: release, owner: owner, tresor: tresor, cursor: cursor)
                stored += SharedPage(items: checked, mode: .checked).entries
            }
        case .checked:
            stored = try await checkPending(held.drain().entries)
            try await cache.store(page.items, release: release, owner: owner, tresor: tresor, cursor: cursor)
            stored += page.entries
        }
        if let applied { try await applied(try await kept(stored)) }
        guard let commitments else { return ReplicaStored() }
        let quarantined = !(try await quarantined()).isEmpty
        // A server behind what this cache accepted waits for the patient's device (Docs/design.md §5.2).
        let review = try await cache.reviewCommitments(commitments, patient: patient, tresor: tresor, category: category, quarantined: quarantined)
        return ReplicaStored(problems: review.problem.map { [$0] } ?? [], behind: review.behind.map { [$0] } ?? [])
    }

    /// Checks the signature of each record held pending, a batch at a time, and stores each batch in
    /// sequence order as any checked page (a record that fails is kept aside). The records this pull held
    /// in memory (`earlier`, drained from `held`) are written pending first, without moving the cursor, so
    /// that they are taken in sequence order with rows another process of this doctor wrote pending.
    /// Returns the entries stored, for `watch`.
    func checkPending(_ earlier: [DoctorCache.Entry]) async throws -> [DoctorCache.Entry] {
        let owner = patient.userID
        // A parked first read goes to `pending_records` (staging the records held in memory moves it there first).
        if earlier.isEmpty {
            try await cache.unpark(owner: owner)
        } else {
            try await cache.stage(earlier.map(DoctorCache.Pulled.verified), owner: owner, tresor: tresor, cursor: nil)
        }
        guard try await cache.holdsPending(owner: owner, tresor: tresor) else { return [] }
        var stored: [DoctorCache.Entry] = []
        while case let batch = try await cache.pending(owner: owner, tresor: tresor, limit: 1_024), !batch.isEmpty {
            let checked = try await checkSignatures(batch)
            try await cache.store(checked, release: [], owner: owner, tresor: tresor, cursor: nil, consumed: batch.map(\.sequence))
            if applied != nil { stored += SharedPage(items: checked, mode: .checked).entries }
        }
        return stored
    }

    /// A pull begins or ended without its final page: what it held in memory goes (Docs/commitment-pages.md §8).
    func forgetHeld() { held.clear() }

    /// The signature check (§4.4 step 3) of entries whose other checks passed, on every core: each
    /// verified, or kept aside as badly signed.
    func checkSignatures(_ entries: [DoctorCache.Entry]) async throws -> [DoctorCache.Pulled] {
        let signatures = SignatureCheck.current
        let key = patient.signingKey
        return try await Parallel.map(entries) { entry in
            let env = try StoredEnvelope.decode(entry.bytes)
            guard signatures.isValidSignature(of: env, by: key) else {
                let rid = entry.header.recordID.hex
                return .failed(QuarantinedRecord(sequence: entry.sequence, recordID: rid, versionID: entry.versionID, reason: .invalidSignature))
            }
            return .verified(entry)
        }
    }
}

/// A doctor's page of one share once checked, and what its records still need (Docs/commitment-pages.md §8).
struct SharedPage: Sendable {
    enum Mode: Sendable {
        /// Every check ran, signatures included: stored as it is, after the records held pending.
        case checked
        /// Every check but the signature: held pending.
        case staged
        /// A final page that passed every check but the signature, whose commitment (`shown`) may
        /// authenticate it and every record held pending: all stored at once if it does (the store decides,
        /// in its transaction), each checked on its own if not.
        case candidate(StateCommitment)
    }

    let items: [DoctorCache.Pulled]
    let mode: Mode
    /// The sum of the head elements of `items` (`LtHash.sum(ofHeads:)`), each of which passed its checks:
    /// what storing them folds into the share's set of heads, worked out on every core before the store's
    /// transaction (nil when not worked out). Only `summed` sets it, from the page's own `items`, which
    /// never change: the store adds it in place of each of their elements, so a sum of other records would
    /// stand in for the ones stored (Docs/commitment-pages.md §8).
    private(set) var added: LtHash? = nil

    init(items: [DoctorCache.Pulled], mode: Mode) {
        self.items = items
        self.mode = mode
    }

    /// The page with `added` worked out, when each of its changes passed its checks.
    func summed() async -> SharedPage {
        let entries = entries
        guard entries.count == items.count else { return self }
        var page = self
        page.added = try? await LtHash.sum(ofHeads: entries.map { ($0.header.recordID.hex, $0.versionID) })
        return page
    }

    /// The verified entries.
    var entries: [DoctorCache.Entry] {
        items.compactMap { item in
            guard case let .verified(entry) = item else { return nil }
            return entry
        }
    }
}

/// The checks a doctor runs on one share's pulled changes before caching them (Docs/envelope-v1.md §4.4):
/// the patient's signature and the share's context always, and decryption with the payload checks when
/// the doctor holds the epoch's key (a record under another epoch is kept, and counted as unreadable).
struct SharedRecordCheck: Sendable {
    let context: EnvelopeContext
    let signingKey: SigningPublicKey
    let keys: [UInt32: SymmetricKey]
    let signatures: SignatureCheck
    /// Keeps each record opened, by version id, for the view that follows the refresh.
    var opened: OpenedRecords? = nil

    /// Why `env` fails, or nil when it passes every check the doctor's keys allow; all but the signature
    /// with `deferringSignature` (a commitment is to authenticate the record, Docs/commitment-pages.md).
    /// `versionID` is the envelope's (worked out once by the caller).
    func failure(of env: Envelope, versionID: String, deferringSignature: Bool = false) -> QuarantineReason? {
        do {
            let record =
                deferringSignature
                ? try env.openRecordVerifiedEarlier(keys: keys, expecting: context)
                : try signatures.openRecord(env, keys: keys, authorKey: signingKey, context: context)
            if let opened, let r = record.record { opened.keep(versionID, r) }
        } catch .missingEpochKey {
            // Verified up to the key lookup: a record the doctor may read once granted that epoch.
        } catch {
            return QuarantineReason(error)
        }
        return nil
    }

    /// Checks every change, on every core (all but the signatures with `deferringSignatures`).
    func run(_ changes: [PulledChange], deferringSignatures: Bool = false) async throws -> [DoctorCache.Pulled] {
        try await Parallel.map(changes) { change in
            guard let env = change.envelope else { return .failed(change.quarantined(.malformed)) }
            let versionID = env.versionID
            if let reason = failure(of: env, versionID: versionID, deferringSignature: deferringSignatures) {
                return .failed(change.quarantined(reason))
            }
            guard env.header.timestamp.physicalMs <= UInt64(Int64.max) else { return .failed(change.quarantined(.clockOutOfRange)) }
            return .verified(
                DoctorCache.Entry(
                    sequence: change.sequence,
                    header: env.header,
                    versionID: versionID,
                    bytes: StoredEnvelope.encode(env)
                )
            )
        }
    }
}
