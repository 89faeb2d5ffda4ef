import Foundation
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// The admin's side (Docs/design.md §2, §3): what waits for approval, decisions with their signed
/// approvals, the user list. The signature on each request is checked before, by `AdminSignatureAuthenticator`.
extension VaultService {
    /// This deployment's id, derived from the secret its database holds (Docs/envelope-v1.md §3.5).
    func deploymentID() async throws -> String {
        AdminRequestSignature.deploymentID(serverSecret: try await repository.serverSecret())
    }

    /// A page of what waits (Docs/design.md §6.1): up to `limit` pending registrations after
    /// `after` and up to `limit` pending shares after `sharesAfter`, each list by id.
    func pending(after: UUID?, sharesAfter: UUID?, limit: Int) async throws -> PendingResponse {
        let clamped = Self.listLimit(limit)
        let users = try await repository.users(after: after, status: .pending, limit: clamped + 1)
        let registrations = users.prefix(clamped).map { PendingRegistration(request: $0.registration, receivedAt: $0.createdAt) }
        let now = clock()
        _ = try await repository.expireShares(now: now)
        let rows = try await repository.shares(state: .pending, after: sharesAfter, limit: clamped + 1)
        var shares: [PendingShare] = []
        for s in rows.prefix(clamped).map({ $0.current(at: now) }) where s.state == .pending {
            guard let p = try await repository.user(id: s.patientID)?.certificate,
                let d = try await repository.user(id: s.doctorID)?.certificate
            else { continue }
            shares.append(PendingShare(share: try await shareInfo(s), patient: p, doctor: d))
        }
        return PendingResponse(
            registrations: Array(registrations),
            shares: shares,
            nextSequence: try await nextApprovalSequence(),
            nextCursor: users.prefix(clamped).last?.id ?? after,
            nextShareCursor: rows.prefix(clamped).last?.id ?? sharesAfter,
            done: users.count <= clamped && rows.count <= clamped
        )
    }

    /// The highest stored approval sequence + 1, or a 409 when the stored one is already at the highest
    /// the schema holds (a database edited underneath): no number is offered that could not be stored.
    private func nextApprovalSequence() async throws -> UInt64 {
        let highest = try await repository.maxApprovalSequence()
        guard highest < APILimits.maxApprovalSequence else {
            throw APIError.conflict(
                "the stored approval sequence \(highest) is at or above the highest the server stores (\(APILimits.maxApprovalSequence)): "
                    + "no further approval can be numbered; the database was changed outside the server"
            )
        }
        return highest + 1
    }

    private func requireFreshSequence(_ approval: Approval) async throws {
        guard approval.sequence <= APILimits.maxApprovalSequence else {
            throw APIError(
                .badRequest,
                .invalidApproval,
                "approval sequence \(approval.sequence) is above the highest the server stores (\(APILimits.maxApprovalSequence))"
            )
        }
        let highest = try await repository.maxApprovalSequence()
        guard approval.sequence > highest else {
            throw APIError(.conflict, .invalidApproval, "approval sequence \(approval.sequence) is not above \(highest): stale or replayed approval")
        }
    }

    func approveRegistration(_ id: UUID, _ r: ApproveRegistrationRequest) async throws -> UserSummary {
        guard let user = try await repository.user(id: id) else { throw APIError.notFound("no such registration") }
        guard user.status == .pending else { throw APIError.conflict("registration is \(user.status.rawValue), not pending") }
        do {
            try r.certificate.verify(adminKey: adminKey, userID: id, role: user.role)
            try r.approval.verify(adminKey: adminKey, kind: .registration, subjectID: id, statementHash: r.certificate.statementHash)
        } catch {
            throw APIError(.badRequest, .invalidApproval, "approval rejected: \(error)")
        }
        guard user.registration.matches(r.certificate) else {
            throw APIError(.badRequest, .invalidApproval, "certificate does not match the registered username, role or keys")
        }
        try await requireFreshSequence(r.approval)
        let event = Self.adminEvent(
            "account.approved",
            patientID: user.role == .patient ? id : nil,
            ["username": user.username, "role": user.role.rawValue, "sequence": String(r.approval.sequence)]
        )
        let row = try await repository.decideUser(
            id: id,
            status: .active,
            certificate: r.certificate,
            approval: r.approval,
            reason: nil,
            now: clock(),
            audit: event
        )
        return summary(row)
    }

    func rejectRegistration(_ id: UUID, _ r: RejectRequest) async throws -> UserSummary {
        let reason = try validReason(r.reason)
        guard let user = try await repository.user(id: id) else { throw APIError.notFound("no such registration") }
        let event = Self.adminEvent(
            "account.rejected",
            patientID: user.role == .patient ? id : nil,
            ["username": user.username, "reason": reason]
        )
        let row = try await repository.decideUser(
            id: id,
            status: .rejected,
            certificate: nil,
            approval: nil,
            reason: reason,
            now: clock(),
            audit: event
        )
        return summary(row)
    }

    func approveShare(_ id: UUID, _ r: ApproveShareRequest) async throws -> ShareInfo {
        guard let share = try await repository.share(id: id) else { throw APIError.notFound("no such share") }
        guard share.state == .pending else { throw APIError.conflict("share is \(share.state.rawValue), not pending") }
        do { try r.approval.verifyShare(adminKey: adminKey, shareID: id, grant: share.grant) } catch {
            throw APIError(.badRequest, .invalidApproval, "approval rejected: \(error)")
        }
        if let e = share.expiresAt, e <= clock() { throw APIError.conflict("the share's expiry date has passed; the patient must share again") }
        try await requireFreshSequence(r.approval)
        let event = Self.adminEvent(
            "share.approved",
            patientID: share.patientID,
            [
                "share": Self.idText(id), "category": share.category, "doctor": Self.idText(share.doctorID),
                "sequence": String(r.approval.sequence),
            ]
        )
        let row = try await repository.transitionShare(
            id: id,
            from: [.pending],
            to: .active,
            approval: r.approval,
            reason: nil,
            now: clock(),
            audit: event
        )
        return try await shareInfo(announce(row))
    }

    func rejectShare(_ id: UUID, _ r: RejectRequest) async throws -> ShareInfo {
        let reason = try validReason(r.reason)
        guard let share = try await repository.share(id: id) else { throw APIError.notFound("no such share") }
        let event = Self.adminEvent(
            "share.rejected",
            patientID: share.patientID,
            ["share": Self.idText(id), "category": share.category, "reason": reason]
        )
        let row = try await repository.transitionShare(
            id: id,
            from: [.pending],
            to: .rejected,
            approval: nil,
            reason: reason,
            now: clock(),
            audit: event
        )
        return try await shareInfo(announce(row))
    }

    /// Stores an admin-signed checkpoint of the audit chain (Docs/envelope-v1.md §3.1) once its signature
    /// verifies and the server's own entry at its sequence has the signed hash. Sending the same checkpoint
    /// again is answered with it (a retried request); another one at a stored sequence is a conflict.
    func storeAuditCheckpoint(_ c: AuditCheckpoint) async throws -> AuditCheckpoint {
        do { try c.verify(adminKey: adminKey) } catch {
            throw APIError(.badRequest, .invalidApproval, "checkpoint rejected: \(error)")
        }
        guard c.sequence > 0, let link = try await repository.auditLinks(after: c.sequence - 1, limit: 1).first, link.sequence == c.sequence else {
            throw APIError.conflict("the audit log has no entry \(c.sequence)")
        }
        guard link.hash == c.headHash else {
            throw APIError.conflict("the audit log's hash at entry \(c.sequence) differs from the checkpoint's")
        }
        do {
            try await repository.insertAuditCheckpoint(c, storedAt: clock())
        } catch RepositoryError.conflict(let message) {
            guard try await repository.auditCheckpoints().contains(c) else { throw APIError.conflict(message) }
        }
        return c
    }

    /// A page of every account, whatever its state, by id (Docs/design.md §6.1).
    func users(after: UUID?, limit: Int) async throws -> UserList {
        let clamped = Self.listLimit(limit)
        let rows = try await repository.users(after: after, status: nil, limit: clamped + 1)
        let page = rows.prefix(clamped)
        return UserList(users: page.map(summary), nextCursor: page.last?.id ?? after, done: rows.count <= clamped)
    }

    /// A listing's page size: `limit` within 1 … `APILimits.maxListLimit`.
    static func listLimit(_ limit: Int) -> Int { max(1, min(limit, APILimits.maxListLimit)) }

    func summary(_ u: UserRow) -> UserSummary {
        UserSummary(
            userID: u.id,
            username: u.username,
            role: u.role,
            status: u.status,
            createdAt: u.createdAt,
            fingerprint: u.certificate?.fingerprint
        )
    }

    func validReason(_ reason: String) throws -> String {
        let r = reason.trimmingCharacters(in: .whitespacesAndNewlines)
        guard (1...500).contains(r.count) else { throw APIError.badRequest("a reason of 1 to 500 characters is required") }
        return r
    }
}
