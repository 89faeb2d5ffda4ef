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
            .post(RouterPath(Routes.recoveryBundle), use: recoveryBundle)
            .post(RouterPath(Routes.recover), use: recover)
        authenticated.post(RouterPath(Routes.logout), use: logout)
            .post(RouterPath(Routes.passwordChange), use: changePassword)
            .post(RouterPath(Routes.deleteAccount), use: deleteAccount)
            .post(RouterPath(Routes.recoveryRotate), use: rotateRecovery)
            .get(RouterPath(Routes.sessions), use: sessions)
            .post(RouterPath(Routes.sessionsRevokeOthers), use: revokeOthers)
            .post(RouterPath(Routes.sessionRevoke(":id")), use: revokeSession)
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
        let (body, status) = try await service.register(try await decodeOpen(RegistrationSubmission.self, request))
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

    @Sendable func recoveryBundle(_ request: Request, context: Context) async throws -> RecoveryBundleResponse {
        try await service.recoveryBundle(try await decodeOpen(RecoveryProof.self, request), address: context.clientAddress)
    }

    @Sendable func recover(_ request: Request, context: Context) async throws -> HTTPResponse.Status {
        try await service.recover(try await decodeOpen(RecoveryRequest.self, request), address: context.clientAddress)
        return .noContent
    }

    @Sendable func changePassword(_ request: Request, context: Context) async throws -> HTTPResponse.Status {
        let caller = try context.requireCaller()
        let body = try await request.decode(as: PasswordChangeRequest.self, context: context)
        try await service.changePassword(caller, body, address: context.clientAddress)
        return .noContent
    }

    @Sendable func deleteAccount(_ request: Request, context: Context) async throws -> DeleteAccountResponse {
        let caller = try context.requireCaller()
        let body = try await request.decode(as: DeleteAccountRequest.self, context: context)
        return try await service.deleteAccount(caller, body, address: context.clientAddress)
    }

    @Sendable func rotateRecovery(_ request: Request, context: Context) async throws -> HTTPResponse.Status {
        let caller = try context.requireCaller()
        let body = try await request.decode(as: RecoveryRotationRequest.self, context: context)
        try await service.rotateRecovery(caller, body, address: context.clientAddress)
        return .noContent
    }

    @Sendable func sessions(_ request: Request, context: Context) async throws -> SessionList {
        let caller = try context.requireCaller()
        let after = request.uri.queryParameters.get("after").map { String($0) }
        return try await service.sessions(caller, after: after, limit: try request.queryLimit(default: APILimits.defaultListLimit))
    }

    @Sendable func revokeSession(_ request: Request, context: Context) async throws -> RevokedSessions {
        try await service.revokeSessions(try context.requireCaller(), id: context.parameters.get("id") ?? "")
    }

    @Sendable func revokeOthers(_ request: Request, context: Context) async throws -> RevokedSessions {
        try await service.revokeSessions(try context.requireCaller(), id: nil)
    }
}

// The lifecycle's answers.
extension RecoveryBundleResponse: ResponseEncodable {}
extension SessionList: ResponseEncodable {}
extension RevokedSessions: ResponseEncodable {}
extension DeleteAccountResponse: ResponseEncodable {}
extension SuspensionResponse: ResponseEncodable {}
