import Foundation
import Hummingbird
import VaultAPI
import VaultCore

/// The admin's routes under /v1/admin (Docs/design.md §2, §3): each request is signed with the admin key,
/// checked by `AdminSignatureAuthenticator` before a handler runs; bodies are decoded from what was signed.
struct AdminController: APIController {
    let service: VaultService

    func addRoutes(to group: RouterGroup<Context>) {
        group.get(RouterPath(Routes.adminPending), use: pending)
            .post(RouterPath(Routes.adminApproveRegistration(":id")), use: decision(VaultService.approveRegistration))
            .post(RouterPath(Routes.adminRejectRegistration(":id")), use: decision(VaultService.rejectRegistration))
            .post(RouterPath(Routes.adminApproveShare(":id")), use: decision(VaultService.approveShare))
            .post(RouterPath(Routes.adminRejectShare(":id")), use: decision(VaultService.rejectShare))
            .get(RouterPath(Routes.adminUsers), use: users)
            .get(RouterPath(Routes.adminAudit), use: audit)
            .get(RouterPath(Routes.adminAuditVerify), use: verifyAudit)
            .get(RouterPath(Routes.adminAuditCheckpoints), use: auditCheckpoints)
            .post(RouterPath(Routes.adminAuditCheckpoints), use: storeAuditCheckpoint)
            .post(RouterPath(Routes.adminSuspend(":id")), use: decision(VaultService.suspend))
            .post(RouterPath(Routes.adminReinstate(":id")), use: decision(VaultService.reinstate))
    }

    /// A handler deciding on the registration or share named in the path, from the signed body. The id
    /// is read before the body, so a malformed path is the error reported.
    func decision<Body: Decodable & Sendable, Answer: ResponseGenerator>(
        _ decide: @escaping @Sendable (VaultService) -> (UUID, Body) async throws -> Answer
    ) -> @Sendable (Request, Context) async throws -> Answer {
        { [service] _, context in
            let signed = try context.requireAdmin()
            let id = try context.parameters.uuid("id")
            return try await decide(service)(id, try signed.decode(Body.self))
        }
    }

    @Sendable func pending(_ request: Request, context: Context) async throws -> PendingResponse {
        _ = try context.requireAdmin()
        return try await service.pending(
            after: try request.queryUUID("after"),
            sharesAfter: try request.queryUUID("sharesAfter"),
            limit: try request.queryLimit(default: APILimits.defaultListLimit)
        )
    }

    @Sendable func users(_ request: Request, context: Context) async throws -> UserList {
        _ = try context.requireAdmin()
        return try await service.users(after: try request.queryUUID("after"), limit: try request.queryLimit(default: APILimits.defaultListLimit))
    }

    @Sendable func audit(_ request: Request, context: Context) async throws -> AuditPage {
        _ = try context.requireAdmin()
        let after = try request.query("after", default: 0)
        return try await service.auditPage(after: after, limit: try request.queryLimit(default: 200), patientID: nil)
    }

    @Sendable func verifyAudit(_ request: Request, context: Context) async throws -> AuditVerification {
        _ = try context.requireAdmin()
        return try await service.repository.verifyAudit()
    }

    @Sendable func auditCheckpoints(_ request: Request, context: Context) async throws -> AuditCheckpointList {
        _ = try context.requireAdmin()
        return AuditCheckpointList(checkpoints: try await service.repository.auditCheckpoints())
    }

    @Sendable func storeAuditCheckpoint(_ request: Request, context: Context) async throws -> AuditCheckpoint {
        let signed = try context.requireAdmin()
        return try await service.storeAuditCheckpoint(try signed.decode(AuditCheckpoint.self))
    }
}

// The checkpoint messages are answers of these routes and of the patient's access-log routes.
extension AuditCheckpoint: ResponseEncodable {}
extension AuditCheckpointList: ResponseEncodable {}
extension AuditLinkPage: ResponseEncodable {}
