import Foundation
import VaultCore
import VaultCrypto

// MARK: Accounts and authentication

/// The answer to a registration: the account id and its state.
public struct RegisterResponse: Codable, Sendable, Equatable {
    public var userID: UUID
    public var status: AccountStatus
    public init(userID: UUID, status: AccountStatus) {
        self.userID = userID
        self.status = status
    }
}

/// Asks for the password-hashing parameters of a username.
public struct LoginParametersRequest: Codable, Sendable {
    public var username: String
    public init(username: String) { self.username = username }
}

/// The password-hashing parameters of a username. For an unknown username they are stable fakes,
/// so the answer does not tell who has an account.
public struct LoginParametersResponse: Codable, Sendable, Equatable {
    public var kdf: KDFParameters
    public var salt: Salt
    public init(kdf: KDFParameters, salt: Salt) {
        self.kdf = kdf
        self.salt = salt
    }
}

/// Proves the password by its login key.
public struct LoginRequest: Codable, Sendable {
    public var username: String
    /// The 32-byte login key, base64url.
    public var loginKey: String
    public init(username: String, loginKey: String) {
        self.username = username
        self.loginKey = loginKey
    }
}

/// A session, with what a new device needs: the wrapped key bundle and the user's certificate.
public struct LoginResponse: Codable, Sendable {
    public var token: String
    public var expiresAt: UnixMillis
    public var userID: UUID
    public var role: Role
    public var keyBundle: KeyBundle
    public var certificate: Certificate
    public init(token: String, expiresAt: UnixMillis, userID: UUID, role: Role, keyBundle: KeyBundle, certificate: Certificate) {
        self.token = token
        self.expiresAt = expiresAt
        self.userID = userID
        self.role = role
        self.keyBundle = keyBundle
        self.certificate = certificate
    }
}

/// A user's certificate from the key directory.
public struct DirectoryEntry: Codable, Sendable, Equatable {
    public var certificate: Certificate
    public init(certificate: Certificate) { self.certificate = certificate }
}

// MARK: Tresors

/// Declares a tresor, or a new key epoch of it, with the patient's grant of its keys to the patient's own
/// key (how the patient's other devices receive them).
public struct PutTresorRequest: Codable, Sendable {
    public var selfGrant: Grant
    public init(selfGrant: Grant) { self.selfGrant = selfGrant }
}

/// A tresor as the server knows it: owner, category, newest epoch and the owner's self-grant.
public struct TresorInfo: Codable, Sendable, Equatable {
    public var tresorID: UUID
    public var ownerID: UUID
    public var category: String
    public var currentEpoch: UInt32
    public var selfGrant: Grant
    public var updatedAt: UnixMillis
    public init(tresorID: UUID, ownerID: UUID, category: String, currentEpoch: UInt32, selfGrant: Grant, updatedAt: UnixMillis) {
        self.tresorID = tresorID
        self.ownerID = ownerID
        self.category = category
        self.currentEpoch = currentEpoch
        self.selfGrant = selfGrant
        self.updatedAt = updatedAt
    }
}

/// The patient's tresors.
public struct TresorList: Codable, Sendable {
    public var tresors: [TresorInfo]
    public init(tresors: [TresorInfo]) { self.tresors = tresors }
}

// MARK: Shares

/// A patient's request to share one tresor with one doctor: the grant names both.
public struct CreateShareRequest: Codable, Sendable {
    public var grant: Grant
    public init(grant: Grant) { self.grant = grant }
}

/// A newer grant of an active share carrying new epochs after a key rotation; stored beside the
/// approved grant, which never changes.
public struct UpdateShareGrantRequest: Codable, Sendable {
    public var grant: Grant
    public init(grant: Grant) { self.grant = grant }
}

/// One share, as its patient, its doctor or the admin sees it.
public struct ShareInfo: Codable, Sendable, Equatable {
    public var shareID: UUID
    public var patientID: UUID
    public var patientUsername: String
    public var doctorID: UUID
    public var doctorUsername: String
    public var tresorID: UUID
    public var category: String
    public var state: ShareState
    /// The grant the admin approved (what `approval` covers).
    public var grant: Grant
    public var approval: Approval?
    /// The patient's newest grant after key rotations, if any: same patient, doctor, tresor and expiry,
    /// more epochs, signed by the patient. Clients verify it against the approved grant.
    public var latestGrant: Grant?
    public var reason: String?
    public var createdAt: UnixMillis
    public var updatedAt: UnixMillis
    public var expiresAt: UnixMillis?
    public init(
        shareID: UUID,
        patientID: UUID,
        patientUsername: String,
        doctorID: UUID,
        doctorUsername: String,
        tresorID: UUID,
        category: String,
        state: ShareState,
        grant: Grant,
        approval: Approval?,
        latestGrant: Grant? = nil,
        reason: String?,
        createdAt: UnixMillis,
        updatedAt: UnixMillis,
        expiresAt: UnixMillis?
    ) {
        self.shareID = shareID
        self.patientID = patientID
        self.patientUsername = patientUsername
        self.doctorID = doctorID
        self.doctorUsername = doctorUsername
        self.tresorID = tresorID
        self.category = category
        self.state = state
        self.grant = grant
        self.approval = approval
        self.latestGrant = latestGrant
        self.reason = reason
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.expiresAt = expiresAt
    }
}

/// A list of shares.
public struct ShareList: Codable, Sendable {
    public var shares: [ShareInfo]
    public init(shares: [ShareInfo]) { self.shares = shares }
}

/// One row of a doctor's "My Patients" list.
public struct PatientSummary: Codable, Sendable, Equatable {
    public var patientID: UUID
    public var username: String
    public var categories: [String]
    public var lastChange: UnixMillis
    public init(patientID: UUID, username: String, categories: [String], lastChange: UnixMillis) {
        self.patientID = patientID
        self.username = username
        self.categories = categories
        self.lastChange = lastChange
    }
}

/// The doctor's "My Patients" list.
public struct PatientList: Codable, Sendable {
    public var patients: [PatientSummary]
    public init(patients: [PatientSummary]) { self.patients = patients }
}

// MARK: Records

/// A batch of envelopes to store.
public struct PushRequest: Codable, Sendable {
    public var envelopes: [Envelope]
    public init(envelopes: [Envelope]) { self.envelopes = envelopes }
}

/// What happened to one pushed envelope.
public struct PushResult: Codable, Sendable, Equatable {
    public enum Status: String, Codable, Sendable {
        /// Stored as a new version (and, if it wins, the record's new head).
        case stored
        /// This exact version was already stored: nothing changed.
        case duplicate
        /// Refused; `code` and `reason` say why.
        case rejected
    }

    public var versionID: String
    public var status: Status
    /// The change sequence the version got when it became the head.
    public var sequence: UInt64?
    public var code: APIErrorCode?
    public var reason: String?
    public init(versionID: String, status: Status, sequence: UInt64? = nil, code: APIErrorCode? = nil, reason: String? = nil) {
        self.versionID = versionID
        self.status = status
        self.sequence = sequence
        self.code = code
        self.reason = reason
    }
}

/// A result per pushed envelope, in request order.
public struct PushResponse: Codable, Sendable {
    public var results: [PushResult]
    public init(results: [PushResult]) { self.results = results }
}

/// One change: a record's head at a point of the owner's change sequence.
public struct Change: Codable, Sendable {
    public var sequence: UInt64
    public var envelope: Envelope
    public init(sequence: UInt64, envelope: Envelope) {
        self.sequence = sequence
        self.envelope = envelope
    }
}

/// A page of changes after a cursor.
public struct PullResponse: Codable, Sendable {
    public var changes: [Change]
    /// Pass this as `since` to get the next page.
    public var nextCursor: UInt64
    /// True when there is nothing after `nextCursor` yet.
    public var done: Bool
    public init(changes: [Change], nextCursor: UInt64, done: Bool) {
        self.changes = changes
        self.nextCursor = nextCursor
        self.done = done
    }
}

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

/// Everything waiting for the admin, and the next approval sequence number to use.
public struct PendingResponse: Codable, Sendable {
    public var registrations: [PendingRegistration]
    public var shares: [PendingShare]
    public var nextSequence: UInt64
    public init(registrations: [PendingRegistration], shares: [PendingShare], nextSequence: UInt64) {
        self.registrations = registrations
        self.shares = shares
        self.nextSequence = nextSequence
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

/// All users.
public struct UserList: Codable, Sendable {
    public var users: [UserSummary]
    public init(users: [UserSummary]) { self.users = users }
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
    public init(
        sequence: UInt64,
        at: UnixMillis,
        actor: String,
        action: String,
        patientID: UUID?,
        details: [String: String],
        previousHash: String,
        hash: String
    ) {
        self.sequence = sequence
        self.at = at
        self.actor = actor
        self.action = action
        self.patientID = patientID
        self.details = details
        self.previousHash = previousHash
        self.hash = hash
    }
}

/// A page of audit entries.
public struct AuditPage: Codable, Sendable {
    public var entries: [AuditEntry]
    public var nextCursor: UInt64
    public var done: Bool
    public init(entries: [AuditEntry], nextCursor: UInt64, done: Bool) {
        self.entries = entries
        self.nextCursor = nextCursor
        self.done = done
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
