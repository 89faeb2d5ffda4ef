import Foundation
import VaultAPI
import VaultCore

/// Errors a repository reports that the API turns into specific answers.
public enum RepositoryError: Error, Equatable, Sendable {
    /// A unique constraint would be broken (username taken, an open share exists, …).
    case conflict(String)
    /// The row to change does not exist, or is not in a state that allows the change.
    case notFound(String)
    /// A state transition was not allowed from the row's current state.
    case invalidTransition(from: String, to: String)
    /// The database could not be reached or answered with an error worth retrying.
    case unavailable(String)
    /// A push checked by its commitment of this tresor does not leave the tresor in the state the
    /// commitment describes: nothing of it was stored (Docs/commitment-pages.md §5).
    case commitmentMismatch(UUID)
}

/// Storage behind the server: small protocols, one per area, composed into one (`VaultRepository`) that
/// two implementations provide (SQLite through GRDB, PostgreSQL through postgres-nio), passing one shared
/// test suite. Every method that changes state takes the audit events that describe the change and writes
/// them in the same transaction.
public protocol VaultRepository:
    StoreRepository, AccountRepository, AccountLifecycleRepository, LoginThrottleRepository, ShareRepository, RecordRepository,
    AuditRepository, ListingRepository, RetentionRepository, IdempotencyRepository
{}

/// The database itself: its schema, its secret, whether it answers.
public protocol StoreRepository: Sendable {
    /// A short name for logs and `/health` ("sqlite", "postgres").
    var backendName: String { get }

    /// Creates or upgrades the schema. Idempotent; safe with several server instances starting at once.
    func migrate() async throws

    /// The migrations the database records as applied (none before the first), for the start-up log.
    func appliedMigrations() async throws -> Set<String>

    /// A random secret made once per database (used for stable fake login parameters).
    func serverSecret() async throws -> [UInt8]

    /// Checks the database answers.
    func ping() async throws
}

/// Users, their registration decisions, and sessions.
public protocol AccountRepository: Sendable {
    /// Inserts a pending user. A username or id already taken throws `.conflict`.
    func insertUser(_ user: UserRow, audit: AuditEvent) async throws
    func user(id: UUID) async throws -> UserRow?
    func user(username: String) async throws -> UserRow?
    func users() async throws -> [UserRow]
    /// Applies `decision` to a pending user; throws `.invalidTransition` unless the user is pending.
    func decideUser(id: UUID, _ decision: UserDecision, now: UnixMillis, audit: AuditEvent) async throws -> UserRow

    func insertSession(_ session: SessionRow) async throws
    func session(tokenHash: String) async throws -> SessionRow?
    func deleteSession(tokenHash: String) async throws
}

/// The login back-off (Docs/design.md §2).
public protocol LoginThrottleRepository: Sendable {
    /// The rows of `keys` that have not expired at `now` (Docs/design.md §2).
    func loginThrottle(keys: [String], now: UnixMillis) async throws -> [LoginThrottleRow]
    /// Reads the live rows of `keys` and writes the rows `decide` returns for them (each replacing the row of
    /// its key), in one atomic step: from the read to the write no other update reads or writes those keys,
    /// so attempts racing on one key are decided one after another (Docs/design.md §2). Expired rows are
    /// deleted. Returns `decide`'s result.
    func updateLoginThrottle<T: Sendable>(
        keys: [String],
        now: UnixMillis,
        _ decide: @Sendable ([LoginThrottleRow]) -> (writes: [LoginThrottleRow], result: T)
    ) async throws -> T
}

/// Tresors and the share lifecycle (Docs/design.md §3).
public protocol ShareRepository: Sendable {
    /// Creates a tresor or moves it to a newer epoch with a new self-grant. A lower epoch than the
    /// stored one throws `.conflict`.
    func upsertTresor(_ tresor: TresorRow, audit: AuditEvent) async throws -> TresorRow
    func tresor(id: UUID) async throws -> TresorRow?
    func tresors(ownerID: UUID) async throws -> [TresorRow]

    /// Inserts a pending share; throws `.conflict` if a pending or active share of the same
    /// patient, doctor and tresor exists.
    func insertShare(_ share: ShareRow, audit: AuditEvent) async throws
    func share(id: UUID) async throws -> ShareRow?
    func shares(patientID: UUID) async throws -> [ShareRow]
    func shares(doctorID: UUID) async throws -> [ShareRow]
    func shares(state: ShareState) async throws -> [ShareRow]
    /// Applies `transition` to a share atomically (compare-and-set); throws `.invalidTransition` if the
    /// share's state is not one the transition starts from.
    func transitionShare(id: UUID, _ transition: ShareTransition, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow
    /// Stores a newer grant of an active share (new key epochs) beside the approved one;
    /// `.invalidTransition` if the share is not active.
    func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow
    /// Keeps the patient's signed revocation with the share (the first one stays).
    func recordRevocation(id: UUID, revocation: ShareRevocation) async throws
    /// A doctor's shares that let them in at `now`: active and not past their end date, whether or not
    /// `expireShares` has moved them yet (`ShareRow.active(at:)`). Writes nothing.
    func activeShares(doctorID: UUID, now: UnixMillis) async throws -> [ShareRow]
    /// The shares between one doctor and one patient, in any state, oldest first.
    func shares(doctorID: UUID, patientID: UUID) async throws -> [ShareRow]
    /// The share that lets `doctorID` read `tresorID` of `patientID` at `now` (as `activeShares`), if any.
    /// Writes nothing.
    func activeShare(doctorID: UUID, patientID: UUID, tresorID: UUID, now: UnixMillis) async throws -> ShareRow?
    /// Moves every active share whose expiry has passed to `expired` and every pending one to `rejected`,
    /// auditing each; returns those it expired. Listings (`shares(…, asOf:)`) and grant updates run it first.
    func expireShares(now: UnixMillis) async throws -> [ShareRow]
    /// The highest approval sequence number stored so far (0 if none).
    func maxApprovalSequence() async throws -> UInt64
}

/// Record versions, their heads and the owners' change sequences (Docs/design.md §5).
public protocol RecordRepository: Sendable {
    /// `storeVersions`, and in the same transaction each tresor's newest state commitment replaced by
    /// one of `commitments`, each of which must be above the stored sequence (any when none is stored,
    /// Docs/design.md §5.2); otherwise nothing is stored and this throws `.conflict` naming the stale commitment.
    /// Stores versions of one owner's records in one transaction: append-only and idempotent by
    /// version id, updating each record's head by last-writer-wins and giving every new head the next
    /// number of the owner's change sequence. Writers of one owner are serialised so that a reader's
    /// cursor can never pass a sequence number that is not yet committed. A version whose record's head
    /// lives in another tresor is refused (`.misplaced`, nothing of it stored): a record never moves.
    /// Throws `.notFound("account")`, storing nothing, when the owner has no account (deleted since the
    /// push was authenticated): the check and the store share the owner's lock.
    /// The versions arrive chunk by chunk (a push's store begins while its later envelopes are still
    /// being checked); a stream that fails rolls the transaction back. Outcomes are in stream order.
    func storeVersions(ownerID: UUID, _ versions: VersionChunks, commitments: [CommitmentRow]) async throws -> [StoreOutcome]
    /// Whether a push's store should start with its first checked chunk (true) or once every chunk is
    /// checked (false).
    var streamsPushes: Bool { get }
    /// Like `changes`, but ending earlier once the envelopes would pass `maxBytes` (`StoredPage.fitting`),
    /// and on a final page (nothing left after it) the newest commitments of the tresors it covers (all of
    /// the owner's, or `tresorID`'s), read in the same snapshot as the changes.
    func page(ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int, maxBytes: Int) async throws -> StoredPage

    /// The owner's tresors whose stored commitment does not describe their stored head state (the fold of
    /// their heads, Docs/commitment-pages.md §5): a push's commitment of one of them cannot be expected to
    /// match, so its envelopes are checked one by one.
    func tresorsOutOfStep(ownerID: UUID) async throws -> Set<UUID>

    /// Heads changed after `since`, in sequence order, at most `limit`; only `tresorID`'s when given.
    func changes(ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int) async throws -> [ChangeRow]
    /// When the tresor's newest change (by the owner's sequence) was stored, for "My Patients": one row
    /// read through the owner's sequence index, not every head of the tresor.
    func lastChange(ownerID: UUID, tresorID: UUID) async throws -> UnixMillis?
}

/// The hash-chained audit log and its signed checkpoints (Docs/design.md §6), and the admin requests'
/// replay guard.
public protocol AuditRepository: Sendable {
    /// Appends events outside any other change (logins, reads).
    func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws
    /// Entries after `after`, at most `limit`; only those about `patientID` when given.
    func auditEntries(after: UInt64, limit: Int, patientID: UUID?) async throws -> [AuditEntry]
    /// The sequence and hash of the newest entry, as recorded separately from the entries.
    func auditHead() async throws -> (sequence: UInt64, hash: String)
    /// The sequence, previous hash and hash of entries after `after`, at most `limit`, without contents.
    func auditLinks(after: UInt64, limit: Int) async throws -> [AuditLink]
    /// Stores an admin-signed checkpoint (checked by the caller); one at a sequence already stored throws `.conflict`.
    func insertAuditCheckpoint(_ checkpoint: AuditCheckpoint, storedAt: UnixMillis) async throws
    /// Every stored checkpoint, by ascending sequence.
    func auditCheckpoints() async throws -> [AuditCheckpoint]

    /// Records an admin request signature; false if it was seen before. Forgets those older than `purgeBefore`.
    func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool
}

/// One row of the login back-off table: failures under a key, or a trusted pair (no failures).
public struct LoginThrottleRow: Sendable, Equatable {
    public var key: String
    public var failures: Int64
    /// When the newest failure happened (0 for a trusted pair).
    public var lastFailure: UnixMillis
    public var expiresAt: UnixMillis
}

extension RecordRepository {
    /// Versions without commitments, as older clients push them.
    public func storeVersions(ownerID: UUID, _ versions: [VersionRow]) async throws -> [StoreOutcome] {
        try await storeVersions(ownerID: ownerID, versions, commitments: [])
    }

    /// Versions known all at once, with commitments.
    public func storeVersions(ownerID: UUID, _ versions: [VersionRow], commitments: [CommitmentRow]) async throws -> [StoreOutcome] {
        try await storeVersions(ownerID: ownerID, VersionChunks(versions), commitments: commitments)
    }
}

extension AccountRepository {
    /// Sets a pending user's status with its certificate and approval (or rejection reason); throws
    /// `.invalidTransition` unless the user is pending.
    public func decideUser(
        id: UUID,
        status: AccountStatus,
        certificate: Certificate?,
        approval: Approval?,
        reason: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws -> UserRow {
        let decision = UserDecision(status: status, certificate: certificate, approval: approval, reason: reason)
        return try await decideUser(id: id, decision, now: now, audit: audit)
    }
}

extension ShareRepository {
    /// A patient's shares as they stand at `now`: those whose end date passed are moved first (persisted
    /// and audited by `expireShares`), so a listing never shows a share past its date as open.
    public func shares(patientID: UUID, asOf now: UnixMillis) async throws -> [ShareRow] {
        _ = try await expireShares(now: now)
        return try await shares(patientID: patientID).map { $0.current(at: now) }
    }

    /// A doctor's shares as they stand at `now` (see `shares(patientID:asOf:)`).
    public func shares(doctorID: UUID, asOf now: UnixMillis) async throws -> [ShareRow] {
        _ = try await expireShares(now: now)
        return try await shares(doctorID: doctorID).map { $0.current(at: now) }
    }

    /// The shares between a doctor and one patient as they stand at `now` (see `shares(patientID:asOf:)`).
    public func shares(doctorID: UUID, patientID: UUID, asOf now: UnixMillis) async throws -> [ShareRow] {
        _ = try await expireShares(now: now)
        return try await shares(doctorID: doctorID, patientID: patientID).map { $0.current(at: now) }
    }

    /// The shares in `state` at `now` (see `shares(patientID:asOf:)`).
    public func shares(state: ShareState, asOf now: UnixMillis) async throws -> [ShareRow] {
        _ = try await expireShares(now: now)
        return try await shares(state: state).map { $0.current(at: now) }.filter { $0.state == state }
    }

    /// Moves a share from one of `from` to `to` atomically (compare-and-set), setting approval or
    /// reason; throws `.invalidTransition` if its state is not in `from`.
    public func transitionShare(
        id: UUID,
        from: Set<ShareState>,
        to: ShareState,
        approval: Approval?,
        reason: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws -> ShareRow {
        try await transitionShare(id: id, ShareTransition(from: from, to: to, approval: approval, reason: reason), now: now, audit: audit)
    }
}

extension AuditRepository {
    /// Walks the whole audit log and checks the chain: consecutive sequence numbers, each previous hash
    /// equal to the hash before it, each hash recomputed from the entry, and the last entry equal to the
    /// separately recorded head (so a deleted newest row is caught too).
    public func verifyAudit() async throws -> AuditVerification {
        var previous = AuditChain.genesis
        var expected: UInt64 = 1
        var checked: UInt64 = 0
        while true {
            let page = try await auditEntries(after: expected - 1, limit: 1_000, patientID: nil)
            if page.isEmpty { break }
            for e in page {
                guard e.sequence == expected else {
                    return AuditVerification(ok: false, entriesChecked: checked, brokenAt: expected, problem: "entry \(expected) is missing")
                }
                guard e.previousHash == previous else {
                    return AuditVerification(ok: false, entriesChecked: checked, brokenAt: e.sequence, problem: "previous-hash link is broken")
                }
                guard AuditChain.hash(of: e) == e.hash else {
                    return AuditVerification(ok: false, entriesChecked: checked, brokenAt: e.sequence, problem: "entry was modified")
                }
                previous = e.hash
                expected += 1
                checked += 1
            }
        }
        let head = try await auditHead()
        guard head.sequence == checked, head.hash == (checked == 0 ? AuditChain.genesis : previous) else {
            return AuditVerification(
                ok: false,
                entriesChecked: checked,
                brokenAt: checked + 1,
                problem: "log ends at \(checked) but its head says \(head.sequence)"
            )
        }
        return AuditVerification(ok: true, entriesChecked: checked, brokenAt: nil, problem: nil)
    }
}
