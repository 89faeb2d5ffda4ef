import Hummingbird
import VaultAPI

/// The admin's routes under /v1/admin (Docs/design.md §2, §3): each request is signed with the admin key,
/// checked by `AdminSignatureAuthenticator` before a handler runs; bodies are decoded from what was signed.
struct AdminController {
    typealias Context = VaultRequestContext

    let service: VaultService

    func addRoutes(to group: RouterGroup<Context>) {
        group.get(RouterPath(Routes.adminPending), use: pending)
            .post(RouterPath(Routes.adminApproveRegistration(":id")), use: approveRegistration)
            .post(RouterPath(Routes.adminRejectRegistration(":id")), use: rejectRegistration)
            .post(RouterPath(Routes.adminApproveShare(":id")), use: approveShare)
            .post(RouterPath(Routes.adminRejectShare(":id")), use: rejectShare)
            .get(RouterPath(Routes.adminUsers), use: users)
            .get(RouterPath(Routes.adminAudit), use: audit)
            .get(RouterPath(Routes.adminAuditVerify), use: verifyAudit)
    }

    @Sendable func pending(_ request: Request, context: Context) async throws -> PendingResponse {
        _ = try context.requireAdmin()
        return try await service.pending()
    }

    @Sendable func approveRegistration(_ request: Request, context: Context) async throws -> UserSummary {
        let signed = try context.requireAdmin()
        let id = try context.parameters.uuid("id")
        return try await service.approveRegistration(id, try signed.decode(ApproveRegistrationRequest.self))
    }

    @Sendable func rejectRegistration(_ request: Request, context: Context) async throws -> UserSummary {
        let signed = try context.requireAdmin()
        let id = try context.parameters.uuid("id")
        return try await service.rejectRegistration(id, try signed.decode(RejectRequest.self))
    }

    @Sendable func approveShare(_ request: Request, context: Context) async throws -> ShareInfo {
        let signed = try context.requireAdmin()
        let id = try context.parameters.uuid("id")
        return try await service.approveShare(id, try signed.decode(ApproveShareRequest.self))
    }

    @Sendable func rejectShare(_ request: Request, context: Context) async throws -> ShareInfo {
        let signed = try context.requireAdmin()
        let id = try context.parameters.uuid("id")
        return try await service.rejectShare(id, try signed.decode(RejectRequest.self))
    }

    @Sendable func users(_ request: Request, context: Context) async throws -> UserList {
        _ = try context.requireAdmin()
        return try await service.users()
    }

    @Sendable func audit(_ request: Request, context: Context) async throws -> AuditPage {
        _ = try context.requireAdmin()
        return try await service.auditPage(after: try request.query("after", default: 0), limit: try request.queryLimit(default: 200), patientID: nil)
    }

    @Sendable func verifyAudit(_ request: Request, context: Context) async throws -> AuditVerification {
        _ = try context.requireAdmin()
        return try await service.repository.verifyAudit()
    }
}
