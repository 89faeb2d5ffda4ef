import Foundation
import VaultCore
import VaultCrypto

// MARK: Admin and audit

/// A registration waiting for the admin.
public struct PendingRegistration: Codable, Sendable, Equatable {
    public var request: RegistrationRequest
    public var receivedAt: UnixMillis
    public init(request: RegistrationRequest, receivedAt: UnixMillis) {
        self.request = request
        self.receivedAt = receivedAt
    }
}

/// A share waiting for the admin, with both parties' certificates so the admin can see what it grants.
public struct PendingShare: Codable, Sendable, Equatable {
    public var share: ShareInfo
    public var patient: Certificate
    public var doctor: Certificate
    public init(share: ShareInfo, patient: Certificate, doctor: Certificate) {
        self.share = share
        self.patient = patient
        self.doctor = doctor
    }
}

/// A page of what waits for the admin, and the next approval sequence number to use. Registrations
/// (by user id) and shares (by share id) are paged side by side: each list holds up to `limit` items
/// after its own cursor (`GET /v1/admin/pending?after=…&sharesAfter=…&limit=…`).
public struct PendingResponse: Codable, Sendable {
    public var registrations: [PendingRegistration]
    public var shares: [PendingShare]
    public var nextSequence: UInt64
    /// Pass as `after` for the next page: the last registration's user id, or the `after` sent when
    /// the page has none (absent on the first page then).
    public var nextCursor: UUID?
    /// Pass as `sharesAfter` for the next page: the last share's id, or the `sharesAfter` sent.
    public var nextShareCursor: UUID?
    /// True when neither list has anything after this page.
    public var done: Bool
    public init(
        registrations: [PendingRegistration],
        shares: [PendingShare],
        nextSequence: UInt64,
        nextCursor: UUID? = nil,
        nextShareCursor: UUID? = nil,
        done: Bool = true
    ) {
        self.registrations = registrations
        self.shares = shares
        self.nextSequence = nextSequence
        self.nextCursor = nextCursor
        self.nextShareCursor = nextShareCursor
        self.done = done
    }
}

/// Approves a registration: the admin-signed certificate and the approval covering it.
public struct ApproveRegistrationRequest: Codable, Sendable {
    public var certificate: Certificate
    public var approval: Approval
    public init(certificate: Certificate, approval: Approval) {
        self.certificate = certificate
        self.approval = approval
    }
}

/// Approves a share.
public struct ApproveShareRequest: Codable, Sendable {
    public var approval: Approval
    public init(approval: Approval) { self.approval = approval }
}

/// Rejects a registration or a share.
public struct RejectRequest: Codable, Sendable {
    public var reason: String
    public init(reason: String) { self.reason = reason }
}

/// One user as the admin sees it.
public struct UserSummary: Codable, Sendable, Equatable {
    public var userID: UUID
    public var username: String
    public var role: Role
    public var status: AccountStatus
    public var createdAt: UnixMillis
    public var fingerprint: String?
    public init(userID: UUID, username: String, role: Role, status: AccountStatus, createdAt: UnixMillis, fingerprint: String?) {
        self.userID = userID
        self.username = username
        self.role = role
        self.status = status
        self.createdAt = createdAt
        self.fingerprint = fingerprint
    }
}

/// A page of users, by user id (`GET /v1/admin/users?after=…&limit=…`).
public struct UserList: Codable, Sendable {
    public var users: [UserSummary]
    /// Pass as `after` for the next page: the last user's id, or the `after` sent when the page is empty.
    public var nextCursor: UUID?
    /// True when no user follows this page.
    public var done: Bool
    public init(users: [UserSummary], nextCursor: UUID? = nil, done: Bool = true) {
        self.users = users
        self.nextCursor = nextCursor
        self.done = done
    }
}

/// One entry of the hash-chained audit log.
public struct AuditEntry: Codable, Sendable, Equatable {
    public var sequence: UInt64
    public var at: UnixMillis
    /// Who acted: a user id, "admin", or "server".
    public var actor: String
    /// What happened, e.g. `share.approved`, `records.read`.
    public var action: String
    /// The patient this is about, when there is one (what the patient's access log shows).
    public var patientID: UUID?
    /// Further facts: ids, counts, reasons. Never health data, never key material.
    public var details: [String: String]
    /// The hash of the previous entry (hex), and of this one.
    public var previousHash: String
    public var hash: String
    /// The entry format (Docs/envelope-v1.md §3.1): absent for 1, 2 for entries with per-patient links.
    public var format: UInt8?
    /// Format 2, about a patient: `AuditChain.patientLink` of the patient's audit key and the hash of the
    /// newest earlier entry about the same patient (Docs/envelope-v1.md §3.1).
    public var patientLink: String?
    public init(
        sequence: UInt64,
        at: UnixMillis,
        actor: String,
        action: String,
        patientID: UUID?,
        details: [String: String],
        previousHash: String,
        hash: String,
        format: UInt8? = nil,
        patientLink: String? = nil
    ) {
        self.sequence = sequence
        self.at = at
        self.actor = actor
        self.action = action
        self.patientID = patientID
        self.details = details
        self.previousHash = previousHash
        self.hash = hash
        self.format = format
        self.patientLink = patientLink
    }
}

/// The audit chain hashes an entry's own fields (Docs/design.md §6).
extension AuditEntry: AuditChainEntry {
    public var entryFormat: UInt8 { format ?? 1 }
}

/// A page of audit entries.
public struct AuditPage: Codable, Sendable {
    public var entries: [AuditEntry]
    public var nextCursor: UInt64
    public var done: Bool
    /// In a patient's access log: the patient's audit key (64 hex digits), from which its genesis hash is
    /// computed (`AuditChain.patientGenesis`, Docs/envelope-v1.md §3.1).
    public var patientKey: String?
    public init(entries: [AuditEntry], nextCursor: UInt64, done: Bool, patientKey: String? = nil) {
        self.entries = entries
        self.nextCursor = nextCursor
        self.done = done
        self.patientKey = patientKey
    }
}

/// The result of checking the whole audit chain.
public struct AuditVerification: Codable, Sendable, Equatable {
    public var ok: Bool
    public var entriesChecked: UInt64
    /// The first sequence number at which the chain breaks.
    public var brokenAt: UInt64?
    public var problem: String?
    public init(ok: Bool, entriesChecked: UInt64, brokenAt: UInt64?, problem: String?) {
        self.ok = ok
        self.entriesChecked = entriesChecked
        self.brokenAt = brokenAt
        self.problem = problem
    }
}

/// The admin-signed checkpoints of the audit chain, oldest first (Docs/envelope-v1.md §3.1).
public struct AuditCheckpointList: Codable, Sendable, Equatable {
    public var checkpoints: [AuditCheckpoint]
    public init(checkpoints: [AuditCheckpoint]) { self.checkpoints = checkpoints }
}

/// One entry of the audit chain without its contents: what a patient needs to check that its own
/// entries lie on the chain a signed checkpoint pins (Docs/design.md §6).
public struct AuditLink: Codable, Sendable, Equatable {
    public var sequence: UInt64
    /// The previous entry's hash (hex), and this entry's.
    public var previousHash: String
    public var hash: String
    /// The entry's format: absent for 1; for 2, `digest` and `patientLink` let anyone recompute `hash`
    /// (`AuditChain.linkHash`, Docs/envelope-v1.md §3.1).
    public var format: UInt8?
    /// Format 2: the digest of the entry's contents (`AuditChain.digest`), hex.
    public var digest: String?
    /// Format 2: the entry's `patientLink`, when it is about a patient.
    public var patientLink: String?
    public init(sequence: UInt64, previousHash: String, hash: String, format: UInt8? = nil, digest: String? = nil, patientLink: String? = nil) {
        self.sequence = sequence
        self.previousHash = previousHash
        self.hash = hash
        self.format = format
        self.digest = digest
        self.patientLink = patientLink
    }
}

/// A page of audit links.
public struct AuditLinkPage: Codable, Sendable {
    public var links: [AuditLink]
    /// Pass as `after` for the next page.
    public var nextCursor: UInt64
    public var done: Bool
    public init(links: [AuditLink], nextCursor: UInt64, done: Bool) {
        self.links = links
        self.nextCursor = nextCursor
        self.done = done
    }
}

/// `GET /health`.
public struct HealthResponse: Codable, Sendable {
    public var status: String
    public var database: String
    public var version: String
    public init(status: String, database: String, version: String) {
        self.status = status
        self.database = database
        self.version = version
    }
}

/// Suspends an account (`POST /v1/admin/users/{id}/suspend`): it cannot log in or read, its sessions end,
/// its data stays.
public struct SuspendRequest: Codable, Sendable {
    /// Why, shown to the user when a login is refused.
    public var reason: String
    /// A suspension for `reason`.
    public init(reason: String) { self.reason = reason }
}

/// An account's suspension state after a suspend or reinstate.
public struct SuspensionResponse: Codable, Sendable, Equatable {
    /// The account.
    public var userID: UUID
    /// Its username.
    public var username: String
    /// When it was suspended; nil once reinstated.
    public var suspendedAt: UnixMillis?
    /// Why.
    public var reason: String?
    /// The state of one account.
    public init(userID: UUID, username: String, suspendedAt: UnixMillis?, reason: String?) {
        self.userID = userID
        self.username = username
        self.suspendedAt = suspendedAt
        self.reason = reason
    }
}

/// `GET /v1/deployment`: the id every signed admin request to this deployment names (Docs/envelope-v1.md §3.5).
public struct DeploymentResponse: Codable, Sendable, Equatable {
    public var deploymentID: String
    public init(deploymentID: String) { self.deploymentID = deploymentID }
}
