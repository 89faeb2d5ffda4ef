import Foundation
import VaultCore
import VaultCrypto

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

/// The body of a revocation: the patient's signed statement that the share is over (Docs/envelope-v1.md
/// §3.3), required.
public struct RevokeShareRequest: Codable, Sendable {
    public var revocation: ShareRevocation
    public init(revocation: ShareRevocation) { self.revocation = revocation }
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
    /// The patient's signed revocation, once the patient ended the share.
    public var revocation: ShareRevocation?
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
        revocation: ShareRevocation? = nil,
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
        self.revocation = revocation
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

/// A page of the doctor's "My Patients" list, by patient id (`GET /v1/doctor/patients?after=…&limit=…`).
public struct PatientList: Codable, Sendable {
    public var patients: [PatientSummary]
    /// Pass as `after` for the next page: the last patient's id, or the `after` sent when the page is empty.
    public var nextCursor: UUID?
    /// True when no patient follows this page.
    public var done: Bool
    public init(patients: [PatientSummary], nextCursor: UUID? = nil, done: Bool = true) {
        self.patients = patients
        self.nextCursor = nextCursor
        self.done = done
    }
}
