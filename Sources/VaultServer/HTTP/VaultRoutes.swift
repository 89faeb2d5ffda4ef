import Foundation
import Hummingbird
import VaultAPI
import VaultCore

/// Maps every route of `openapi.yaml` to the service. Handlers only parse, call and encode.
struct VaultRoutes: Sendable {
    let service: VaultService

    func register(on router: Router<VaultRequestContext>) {
        router.get("/health") { _, _ in
            do { try await service.repository.ping() } catch {
                throw APIError(.serviceUnavailable, .unavailable, "database is not reachable")
            }
            return try JSONResponse.make(HealthResponse(status: "ok", database: service.repository.backendName, version: "1"))
        }

        // Accounts and authentication
        router.post("/v1/accounts/register") { request, _ in
            var request = request
            let (body, status) = try await service.register(try await request.decodeJSON(RegistrationRequest.self))
            return try JSONResponse.make(body, status: status)
        }
        router.post("/v1/auth/params") { request, _ in
            var request = request
            return try JSONResponse.make(try await service.loginParameters(username: try await request.decodeJSON(LoginParametersRequest.self).username))
        }
        router.post("/v1/auth/login") { request, context in
            var request = request
            let body = try await request.decodeJSON(LoginRequest.self)
            return try JSONResponse.make(try await service.login(body, address: context.clientAddress))
        }
        router.post("/v1/auth/logout") { request, _ in
            try await service.logout(try await service.authenticate(request))
            return Response(status: .noContent)
        }
        router.get("/v1/accounts/me") { request, _ in
            let caller = try await service.authenticate(request)
            return try JSONResponse.make(DirectoryEntry(certificate: caller.certificate))
        }
        router.get("/v1/directory/users/:username") { request, context in
            _ = try await service.authenticate(request)
            return try JSONResponse.make(try await service.directory(username: context.parameters.get("username") ?? ""))
        }
        router.get("/v1/directory/ids/:id") { request, context in
            _ = try await service.authenticate(request)
            return try JSONResponse.make(try await service.directory(id: try context.parameters.uuid("id")))
        }

        // Tresors and shares
        router.put("/v1/tresors") { request, _ in
            var request = request
            let caller = try await service.authenticate(request)
            return try JSONResponse.make(try await service.putTresor(caller, try await request.decodeJSON(PutTresorRequest.self)))
        }
        router.get("/v1/tresors") { request, _ in
            try JSONResponse.make(try await service.tresors(try await service.authenticate(request)))
        }
        router.post("/v1/shares") { request, _ in
            var request = request
            let caller = try await service.authenticate(request)
            return try JSONResponse.make(try await service.createShare(caller, try await request.decodeJSON(CreateShareRequest.self)), status: .created)
        }
        router.get("/v1/shares") { request, _ in
            try JSONResponse.make(try await service.shares(try await service.authenticate(request)))
        }
        router.post("/v1/shares/:id/revoke") { request, context in
            let caller = try await service.authenticate(request)
            return try JSONResponse.make(try await service.revokeShare(caller, try context.parameters.uuid("id")))
        }
        router.put("/v1/shares/:id/grant") { request, context in
            var request = request
            let caller = try await service.authenticate(request)
            let body = try await request.decodeJSON(UpdateShareGrantRequest.self)
            return try JSONResponse.make(try await service.updateShareGrant(caller, try context.parameters.uuid("id"), body))
        }
        router.get("/v1/doctor/patients") { request, _ in
            try JSONResponse.make(try await service.patients(try await service.authenticate(request)))
        }

        // Records
        router.post("/v1/records") { request, _ in
            var request = request
            let caller = try await service.authenticate(request)
            return try JSONResponse.make(try await service.push(caller, try await request.decodeJSON(PushRequest.self)))
        }
        router.get("/v1/records") { request, _ in
            let caller = try await service.authenticate(request)
            let page = try await service.pull(caller, owner: try request.queryUUID("owner"), tresor: try request.queryUUID("tresor"),
                                              since: try request.query("since", default: 0),
                                              limit: Int(clamping: try request.query("limit", default: UInt64(APILimits.defaultPullLimit))))
            return JSONResponse.raw(page.body())
        }
        router.get("/v1/access-log") { request, _ in
            let caller = try await service.authenticate(request)
            return try JSONResponse.make(try await service.accessLog(caller, after: try request.query("after", default: 0),
                                                                     limit: Int(clamping: try request.query("limit", default: 200))))
        }

        // Admin (signed requests)
        router.get("/v1/admin/pending") { request, _ in
            var request = request
            _ = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.pending())
        }
        router.post("/v1/admin/registrations/:id/approve") { request, context in
            var request = request
            let body = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.approveRegistration(try context.parameters.uuid("id"),
                                                                               try JSONBody.decode(ApproveRegistrationRequest.self, from: body)))
        }
        router.post("/v1/admin/registrations/:id/reject") { request, context in
            var request = request
            let body = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.rejectRegistration(try context.parameters.uuid("id"), try JSONBody.decode(RejectRequest.self, from: body)))
        }
        router.post("/v1/admin/shares/:id/approve") { request, context in
            var request = request
            let body = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.approveShare(try context.parameters.uuid("id"), try JSONBody.decode(ApproveShareRequest.self, from: body)))
        }
        router.post("/v1/admin/shares/:id/reject") { request, context in
            var request = request
            let body = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.rejectShare(try context.parameters.uuid("id"), try JSONBody.decode(RejectRequest.self, from: body)))
        }
        router.get("/v1/admin/users") { request, _ in
            var request = request
            _ = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.users())
        }
        router.get("/v1/admin/audit") { request, _ in
            var request = request
            _ = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.auditPage(after: try request.query("after", default: 0),
                                                                     limit: Int(clamping: try request.query("limit", default: 200))))
        }
        router.get("/v1/admin/audit/verify") { request, _ in
            var request = request
            _ = try await service.authenticateAdmin(&request)
            return try JSONResponse.make(try await service.repository.verifyAudit())
        }
    }
}
