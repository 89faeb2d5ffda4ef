import Hummingbird
import VaultAPI
import VaultCore

/// Accounts and sessions (Docs/design.md §2): registration and login are open, the rest needs a session.
struct AccountController: APIController {
    let service: VaultService

    /// Adds the open routes to `group` and the session routes to `authenticated`.
    func addRoutes(to group: RouterGroup<Context>, authenticated: RouterGroup<Context>) {
        group.post(RouterPath(Routes.register), use: register)
            .post(RouterPath(Routes.loginParameters), use: loginParameters)
            .post(RouterPath(Routes.login), use: login)
        authenticated.post(RouterPath(Routes.logout), use: logout)
            .get(RouterPath(Routes.me), use: me)
            .get(RouterPath(Routes.userByName(":username")), use: userByName)
            .get(RouterPath(Routes.userByID(":id")), use: userByID)
    }

    @Sendable func register(_ request: Request, context: Context) async throws -> EditedResponse<RegisterResponse> {
        let (body, status) = try await service.register(try await request.decode(as: RegistrationRequest.self, context: context))
        return EditedResponse(status: status, response: body)
    }

    @Sendable func loginParameters(_ request: Request, context: Context) async throws -> LoginParametersResponse {
        try await service.loginParameters(username: try await request.decode(as: LoginParametersRequest.self, context: context).username)
    }

    @Sendable func login(_ request: Request, context: Context) async throws -> LoginResponse {
        try await service.login(try await request.decode(as: LoginRequest.self, context: context), address: context.clientAddress)
    }

    @Sendable func logout(_ request: Request, context: Context) async throws -> HTTPResponse.Status {
        try await service.logout(try context.requireCaller())
        return .noContent
    }

    @Sendable func me(_ request: Request, context: Context) async throws -> DirectoryEntry {
        DirectoryEntry(certificate: try context.requireCaller().certificate)
    }

    @Sendable func userByName(_ request: Request, context: Context) async throws -> DirectoryEntry {
        try await service.directory(username: context.parameters.get("username") ?? "")
    }

    @Sendable func userByID(_ request: Request, context: Context) async throws -> DirectoryEntry {
        try await service.directory(id: try context.parameters.uuid("id"))
    }
}
