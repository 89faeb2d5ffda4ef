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

    /// Bodies of these open routes are read up to `APILimits.maxOpenBodyBytes`, not the general limit.
    private func decodeOpen<T: Decodable>(_ type: T.Type, _ request: Request) async throws -> T {
        try await VaultRequestDecoder.decode(T.self, from: request, limit: APILimits.maxOpenBodyBytes)
    }

    @Sendable func register(_ request: Request, context: Context) async throws -> EditedResponse<RegisterResponse> {
        // Counted before the body is read, so a flood costs the server as little as possible.
        try service.admitRegistration(address: context.clientAddress)
        let (body, status) = try await service.register(try await decodeOpen(RegistrationRequest.self, request))
        return EditedResponse(status: status, response: body)
    }

    @Sendable func loginParameters(_ request: Request, context: Context) async throws -> LoginParametersResponse {
        try await service.loginParameters(username: try await decodeOpen(LoginParametersRequest.self, request).username)
    }

    @Sendable func login(_ request: Request, context: Context) async throws -> LoginResponse {
        try await service.login(try await decodeOpen(LoginRequest.self, request), address: context.clientAddress)
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
