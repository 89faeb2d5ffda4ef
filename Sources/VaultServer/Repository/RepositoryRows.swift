import Foundation
import VaultAPI
import VaultCore

// The rows a repository stores and returns (Docs/design.md §6), apart from the protocol that moves them.

/// A user account as stored.
public struct UserRow: Sendable, Equatable {
    public var id: UUID
    /// Normalised (lower-case): unique.
    public var username: String
    public var role: Role
    public var status: AccountStatus
    /// The signed registration (keys, KDF parameters, salt, login verifier, key bundle).
    public var registration: RegistrationRequest
    public var certificate: Certificate?
    public var approval: Approval?
    public var rejectReason: String?
    public var createdAt: UnixMillis
    public var updatedAt: UnixMillis
}

/// A session token, stored only as its hash.
public struct SessionRow: Sendable, Equatable {
    public var tokenHash: String
    public var userID: UUID
    public var createdAt: UnixMillis
    public var expiresAt: UnixMillis
}

/// A tresor as stored: which owner and category, the newest epoch, the owner's self-grant.
public struct TresorRow: Sendable, Equatable {
    public var id: UUID
    public var ownerID: UUID
    public var category: String
    public var currentEpoch: UInt32
    public var selfGrant: Grant
    public var updatedAt: UnixMillis
}

/// A share: one row, one state machine (Docs/design.md §3).
public struct ShareRow: Sendable, Equatable {
    public var id: UUID
    public var patientID: UUID
    public var doctorID: UUID
    public var tresorID: UUID
    public var category: String
    public var state: ShareState
    /// The grant the admin approved; it never changes.
    public var grant: Grant
    public var approval: Approval?
    /// The patient's newest grant after key rotations (same parties, tresor and expiry, more epochs).
    public var latestGrant: Grant? = nil
    /// The patient's signed revocation, when the patient ended the share.
    public var revocation: ShareRevocation? = nil
    public var reason: String?
    public var createdAt: UnixMillis
    public var updatedAt: UnixMillis
    public var expiresAt: UnixMillis?
}

/// One envelope version ready to store: its header fields as columns and the envelope in its binary
/// encoding, the bytes the patient pushed (Docs/envelope-v1.md §7.1).
public struct VersionRow: Sendable {
    public var versionID: String
    public var ownerID: UUID
    public var recordID: String
    public var tresorID: UUID
    public var epoch: UInt32
    public var hlcPhysical: Int64
    public var hlcCounter: Int64
    public var hlcDevice: String
    public var deleted: Bool
    public var envelope: [UInt8]

    /// Last-writer-wins order (Docs/design.md §5): by HLC (physical, counter, device); on an exact tie a
    /// tombstone wins. Every server and client uses this same order.
    public func wins(over head: HeadKey) -> Bool {
        if hlcPhysical != head.hlcPhysical { return hlcPhysical > head.hlcPhysical }
        if hlcCounter != head.hlcCounter { return hlcCounter > head.hlcCounter }
        if !hlcDevice.utf8.elementsEqual(head.hlcDevice.utf8) { return HLCTimestamp.deviceIDPrecedes(head.hlcDevice, hlcDevice) }
        return deleted && !head.deleted
    }
}

/// The ordering fields of a record's current head.
public struct HeadKey: Sendable, Equatable {
    public var hlcPhysical: Int64
    public var hlcCounter: Int64
    public var hlcDevice: String
    public var deleted: Bool
}

/// What storing one version did.
public enum StoreOutcome: Sendable, Equatable {
    /// New version; `sequence` is set when it became the record's head.
    case stored(sequence: UInt64?)
    /// The version id was already stored.
    case duplicate
    /// Refused, nothing stored: the record lives in another tresor (Docs/design.md §4).
    case misplaced
}

/// A change: the sequence at which a head was written, with the envelope as stored (binary, §7.1).
public struct ChangeRow: Sendable {
    public var sequence: UInt64
    public var envelope: [UInt8]
}

/// One page of changes as a pull serves it (Docs/envelope-v1.md §7.3).
public struct StoredPage: Sendable {
    /// The changes, in sequence order.
    public var changes: [ChangeRow]
    /// True when no change after these existed in the page's snapshot.
    public var done: Bool
    /// On a final page, the newest commitment of each tresor it covers.
    public var commitments: [CommitmentRow]

    /// The bytes of a page's framing besides its changes: its head and, without commitments, its tail.
    public static let pageFraming = 21

    /// How many of the changes whose envelopes take `sizes` bytes fit in a page of `maxBytes` (§7.3):
    /// each costs 13 bytes of framing besides its envelope, the page 21 more (its head and, without
    /// commitments, its tail), and the first change always fits.
    public static func fitting(_ sizes: [Int], maxBytes: Int) -> Int {
        var total = pageFraming
        for (i, size) in sizes.enumerated() {
            total += PullPageFrame.changeCount(envelopeBytes: size)
            if total > maxBytes { return max(i, 1) }
        }
        return sizes.count
    }
}

/// A tresor's newest state commitment as stored (Docs/envelope-v1.md §3.4): its sequence, and the
/// statement's JSON as the patient pushed it (checked by the service before it is stored).
public struct CommitmentRow: Sendable, Equatable {
    public var tresorID: UUID
    public var sequence: UInt64
    public var json: [UInt8]
    /// Set on a pushed commitment that checks its batch (Docs/commitment-pages.md §5): the store refuses
    /// the push unless the tresor's state after it is the one this commitment describes. Never stored.
    public var expected: StateCommitment?
    public init(tresorID: UUID, sequence: UInt64, json: [UInt8], expected: StateCommitment? = nil) {
        self.tresorID = tresorID
        self.sequence = sequence
        self.json = json
        self.expected = expected
    }

    /// The refusal of a commitment that does not follow the stored one: the whole push is refused.
    static func stale(_ c: CommitmentRow, stored: UInt64) -> RepositoryError {
        .conflict(
            "the state commitment of tresor \(c.tresorID.uuidString.lowercased()) is stale: sequence \(c.sequence) was sent, "
                + "the server holds \(stored); pull, recompute and commit sequence \(stored < .max ? String(stored + 1) : "none (exhausted)")"
        )
    }
}

extension CommitmentRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        tresorID = try r.uuid("tresor_id")
        sequence = try r.uint64("sequence")
        json = try r.bytes("statement")
    }
}

/// Something to write to the audit log, in the same transaction as the change it records.
public struct AuditEvent: Sendable, Equatable {
    public var actor: String
    public var action: String
    public var patientID: UUID?
    public var details: [String: String]
    /// When it happened, where that is not the time the append is given: an event appended with others
    /// in one batch (`AuditBatcher`) keeps the time of the request it records.
    public var at: UnixMillis?

    public init(actor: String, action: String, patientID: UUID? = nil, details: [String: String] = [:], at: UnixMillis? = nil) {
        self.actor = actor
        self.action = action
        self.patientID = patientID
        self.details = details
        self.at = at
    }
}

/// Rules both backends apply to a tresor update before writing it.
extension TresorRow {
    /// Checks `proposed` against the stored tresor: the same owner and category, never an older epoch
    /// (Docs/design.md §2). True when it declares the stored epoch again with the same keys, so nothing is written.
    static func unchanged(_ existing: TresorRow, proposed t: TresorRow) throws -> Bool {
        guard existing.ownerID == t.ownerID, existing.category == t.category else {
            throw RepositoryError.conflict("tresor belongs to another owner or category")
        }
        guard t.currentEpoch >= existing.currentEpoch else { throw RepositoryError.conflict("tresor is already at epoch \(existing.currentEpoch)") }
        if t.selfGrant == existing.selfGrant { return true }
        // A new self-grant is above the stored tresor version (Docs/envelope-v1.md §3.2): two devices that
        // changed the same version concurrently propose the same next one, the second conflicts, merges and
        // tries again. A version may skip numbers: a device declaring again after a restore to an older
        // backup goes on from the newest version it saw (Docs/design.md §5.2).
        let stored = existing.selfGrant.tresorVersion ?? 0
        guard (t.selfGrant.tresorVersion ?? 0) > stored else {
            throw RepositoryError.conflict("tresor is at version \(stored); merge and declare a version after it")
        }
        return false
    }
}

extension UserRow {
    /// The conflict reported when the schema refuses a username or user id already taken.
    static let alreadyRegistered = "username or user id already registered"
}

extension ShareRow {
    /// The conflict reported when the schema refuses a second open share.
    static let openShareExists = "a pending or active share of this category with this doctor exists"

    /// This share as `expireShares` leaves it at `now`. A listing reads its rows through this too: on
    /// PostgreSQL a concurrent `expireShares` skips the rows another one is moving, which read as
    /// before until that one commits.
    func current(at now: UnixMillis) -> ShareRow {
        guard let end = expiresAt, end <= now else { return self }
        switch state {
        case .active: return expired(at: now)
        case .pending:
            var s = self
            s.state = .rejected
            s.reason = AuditEvent.expiredBeforeApproval
            s.updatedAt = now
            return s
        default: return self
        }
    }

    /// This share as `expireShares` reports it after moving it.
    func expired(at now: UnixMillis) -> ShareRow {
        var s = self
        s.state = .expired
        s.updatedAt = now
        return s
    }
}

/// The server's own events when shares run out (Docs/design.md §3), built here once so both backends
/// record the same actions and details.
extension AuditEvent {
    /// Why a pending share whose expiry passed before approval was closed.
    static let expiredBeforeApproval = "expired before approval"

    /// An active share reached its expiry.
    static func shareExpired(_ share: ShareRow) -> AuditEvent {
        AuditEvent(
            actor: "server",
            action: "share.expired",
            patientID: share.patientID,
            details: ["share": share.id.storedText, "doctor": share.doctorID.storedText, "category": share.category]
        )
    }

    /// A pending share's expiry passed before an admin approved it.
    static func shareExpiredBeforeApproval(_ share: ShareRow) -> AuditEvent {
        AuditEvent(
            actor: "server",
            action: "share.rejected",
            patientID: share.patientID,
            details: ["share": share.id.storedText, "category": share.category, "reason": expiredBeforeApproval]
        )
    }
}

extension UUID {
    /// The lower-case form ids take in audit details and in SQLite's text columns.
    var storedText: String { uuidString.lowercased() }
}
