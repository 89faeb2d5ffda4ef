import Foundation
import Hummingbird
import VaultAPI

/// Shares between a patient and a doctor (Docs/design.md §3); every route needs a session.
struct ShareController: APIController {
    let service: VaultService

    func addRoutes(to group: RouterGroup<Context>) {
        group.post(RouterPath(Routes.shares), use: create)
            .get(RouterPath(Routes.shares), use: list)
            .post(RouterPath(Routes.shareRevoke(":id")), use: revoke)
            .put(RouterPath(Routes.shareGrant(":id")), use: updateGrant)
            .get(RouterPath(Routes.doctorPatients), use: patients)
    }

    @Sendable func create(_ request: Request, context: Context) async throws -> EditedResponse<ShareInfo> {
        let caller = try context.requireCaller()
        let share = try await service.createShare(caller, try await request.decode(as: CreateShareRequest.self, context: context))
        return EditedResponse(status: .created, response: share)
    }

    @Sendable func list(_ request: Request, context: Context) async throws -> ShareList {
        try await service.shares(try context.requireCaller(), patient: try request.queryUUID("patient"))
    }

    @Sendable func revoke(_ request: Request, context: Context) async throws -> ShareInfo {
        let caller = try context.requireCaller()
        // The patient's signed revocation is required (Docs/envelope-v1.md §3.3); an empty body is refused.
        let body = try await VaultRequestDecoder.decode(RevokeShareRequest.self, from: request, limit: APILimits.maxOpenBodyBytes)
        return try await service.revokeShare(caller, try context.parameters.uuid("id"), body.revocation)
    }

    @Sendable func updateGrant(_ request: Request, context: Context) async throws -> ShareInfo {
        let caller = try context.requireCaller()
        let body = try await request.decode(as: UpdateShareGrantRequest.self, context: context)
        return try await service.updateShareGrant(caller, try context.parameters.uuid("id"), body)
    }

    @Sendable func patients(_ request: Request, context: Context) async throws -> PatientList {
        let caller = try context.requireCaller()
        let after = try request.queryUUID("after")
        return try await service.patients(caller, after: after, limit: try request.queryLimit(default: APILimits.defaultListLimit))
    }
}
