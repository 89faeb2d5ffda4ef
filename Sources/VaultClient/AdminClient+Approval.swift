import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// One registration or share waiting for the admin.
public enum PendingItem: Sendable, Equatable {
    case registration(PendingRegistration)
    case share(PendingShare)

    /// The lowercased user id of a registration or id of a share.
    public var id: String {
        switch self {
        case let .registration(r): return r.request.userID.uuidString.lowercased()
        case let .share(s): return s.share.shareID.uuidString.lowercased()
        }
    }

    /// Whether `name` (any case) is this item's id or, for a registration, its username.
    public func isNamed(by name: String) -> Bool {
        let wanted = name.lowercased()
        if case let .registration(r) = self, r.request.username == wanted { return true }
        return id == wanted
    }
}

extension PendingResponse {
    /// Everything pending, registrations first: a share can only be approved once both accounts are.
    public var items: [PendingItem] { registrations.map(PendingItem.registration) + shares.map(PendingItem.share) }
}

/// What became of one item in a run of approvals.
public struct ApprovalResult: Sendable {
    /// The item that was to be approved.
    public let item: PendingItem
    /// Why it was not approved, or nil when it was.
    public let error: (any Error)?
}

extension AdminClient {
    /// Verifies a registration's self-signature, then issues its certificate and approval and submits
    /// them (Docs/design.md §2). Nothing is signed for a registration that does not verify.
    @discardableResult
    public func approve(_ r: PendingRegistration, sequence: UInt64) async throws -> UserSummary {
        try Self.requireStorable(sequence)
        do { try r.request.verify() } catch {
            throw ClientError.integrity("the registration of \(r.request.username) is not self-signed correctly: \(error)")
        }
        let now = Date().unixMillis
        let cert = try Certificate.issue(
            userID: r.request.userID,
            username: r.request.username,
            role: r.request.role,
            signingKey: r.request.signingKey,
            boxKey: r.request.boxKey,
            issuedAt: now,
            adminKey: key
        )
        // Recorded before the certificate leaves this process: a name or id certified before with other
        // keys is refused here, whatever the server presents.
        try await ledger?.admit(cert)
        let approval = Approval.registration(cert, issuedAt: now, sequence: sequence, adminKey: key)
        return try await transport.send(
            AdminEndpoints.approveRegistration(r.request.userID.uuidString),
            ApproveRegistrationRequest(certificate: cert, approval: approval),
            auth: auth
        )
    }

    /// Checks that the share is what it claims (both certificates verify under the pinned key, the grant
    /// is the patient's and names that doctor and tresor) before signing an approval of exactly that
    /// grant (Docs/design.md §3).
    @discardableResult
    public func approve(_ s: PendingShare, sequence: UInt64) async throws -> ShareInfo {
        try Self.requireStorable(sequence)
        do {
            try s.patient.verify(adminKey: pinnedKey, userID: s.share.patientID, role: .patient)
            try s.doctor.verify(adminKey: pinnedKey, userID: s.share.doctorID, role: .doctor)
            let grant = s.share.grant
            try grant.verify(patient: s.patient, adminKey: pinnedKey)
            guard grant.memberID == s.doctor.userID, grant.tresorID == s.share.tresorID, grant.category == s.share.category else {
                throw TrustError.mismatch(what: "share", field: "grant")
            }
            // Patients file requests, which carry no keys; a keyed grant presented as pending is a delivered
            // grant of another share copied by the server.
            guard grant.isRequest else { throw TrustError.mismatch(what: "share", field: "request") }
        } catch { throw ClientError.integrity("the share \(s.share.shareID.uuidString.lowercased()) does not verify: \(error)") }
        // Recorded before the approval leaves this process: a request decided before (a withdrawn or revoked
        // request the server copied into a new share) is refused here.
        let now = Date().unixMillis
        try await decisions?.admit(s.share.grant, shareID: s.share.shareID, decision: .approved, at: now)
        let approval = Approval.share(id: s.share.shareID, grant: s.share.grant, issuedAt: now, sequence: sequence, adminKey: key)
        return try await transport.send(AdminEndpoints.approveShare(s.share.shareID.uuidString), ApproveShareRequest(approval: approval), auth: auth)
    }

    /// Refuses a sequence outside 1...`APILimits.maxApprovalSequence` (offered by a server whose database
    /// was edited) before anything is signed.
    static func requireStorable(_ sequence: UInt64) throws {
        guard (1...APILimits.maxApprovalSequence).contains(sequence) else {
            throw ClientError.integrity(
                "the server offered approval sequence \(sequence), outside 1...\(APILimits.maxApprovalSequence): nothing was signed"
            )
        }
    }

    /// Approves one pending item with approval sequence number `sequence`.
    public func approve(_ item: PendingItem, sequence: UInt64) async throws {
        switch item {
        case let .registration(r): try await approve(r, sequence: sequence)
        case let .share(s): try await approve(s, sequence: sequence)
        }
    }

    /// Approves every item of `pending` that `include` accepts, in order, numbering the approvals from
    /// `pending.nextSequence`. A failed item does not stop the others, nor use up a number.
    public func approveEach(of pending: PendingResponse, where include: (PendingItem) -> Bool = { _ in true }) async -> [ApprovalResult] {
        var sequence = pending.nextSequence
        var results: [ApprovalResult] = []
        for item in pending.items where include(item) {
            do {
                try await approve(item, sequence: sequence)
                sequence = Self.sequence(after: sequence)
                results.append(ApprovalResult(item: item, error: nil))
            } catch {
                results.append(ApprovalResult(item: item, error: error))
            }
        }
        return results
    }

    /// The approval sequence after `sequence`, checked (`APILimits.approvalSequence(after:)`): past the
    /// last storable number `approve` refuses it.
    public static func sequence(after sequence: UInt64) -> UInt64 { APILimits.approvalSequence(after: sequence) }

    /// Approves everything pending; throws the first failure once every item was tried.
    @discardableResult
    public func approveAll() async throws -> [PendingItem] {
        let results = await approveEach(of: try await pending())
        if let error = results.lazy.compactMap(\.error).first { throw error }
        return results.map(\.item)
    }

    /// A short, human-comparable fingerprint of the keys a registration asks to certify: the same as
    /// `Certificate.fingerprint` of the certificate it would get, so both sides can compare out of band.
    public static func fingerprint(_ r: RegistrationRequest) -> String {
        Certificate.fingerprint(signingKey: r.signingKey, boxKey: r.boxKey)
    }
}
