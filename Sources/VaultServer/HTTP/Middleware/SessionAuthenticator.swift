import Foundation
import Hummingbird
import VaultAPI
import VaultCore

/// The authenticated caller of a request.
struct Caller: Sendable {
    let user: UserRow
    let tokenHash: String
    var id: UUID { user.id }
    var certificate: Certificate { user.certificate! }
}

/// Guards the session routes of /v1: a request passes only with the bearer token of a live session of
/// an active, unsuspended account, made under the account's current credentials, and the handler finds
/// that account in `VaultRequestContext.caller` (Docs/design.md §2, §6). Anything else is answered here:
/// 401 without a usable token or session (a session made before the latest password change or recovery
/// is no longer one), 403 for an account that is not active or is suspended. Suspension and credentials
/// are checked on every request, not only at login: a session that slipped past a change is still refused.
struct SessionAuthenticator: RouterMiddleware {
    typealias Context = VaultRequestContext

    let service: VaultService

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let caller = try await authenticate(request)
        context.caller = caller
        // "Last used" for `sessions`; a failed write of it must not fail the request it describes.
        do { try await service.touch(caller) } catch { context.logger.warning("could not record a session's use: \(error)") }
        return try await next(request, context)
    }

    func authenticate(_ request: Request) async throws -> Caller {
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer ") else { throw APIError.unauthorized }
        let token = String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        guard !token.isEmpty, token.count <= 128 else { throw APIError.unauthorized }
        let hash = VaultService.tokenHash(token)
        guard let check = try await service.lifecycle.sessionCheck(tokenHash: hash), check.session.expiresAt > service.clock(),
            check.sessionGeneration == check.accountGeneration
        else {
            throw APIError(.unauthorized, .unauthorized, "session expired or logged out; log in again")
        }
        guard check.suspendedAt == nil else { throw APIError(.forbidden, .forbidden, "account is suspended") }
        guard let user = try await service.repository.user(id: check.session.userID), user.status == .active, user.certificate != nil else {
            throw APIError(.forbidden, .forbidden, "account is not active")
        }
        return Caller(user: user, tokenHash: hash)
    }
}
