import HTTPTypes
import Hummingbird
import VaultAPI

/// Refuses `/v1` requests from clients older than the server serves (Docs/design.md §8): a request that
/// names no release in `CareVault-Client`, or one below `CareVaultVersion.minimumClient`, gets 426
/// `upgrade_required` with a message that says to upgrade, before any other step reads it. A value that
/// is not a release number is a bad request. `/health`, `/ready` and `/metrics` stay open to any caller.
struct ClientVersionMiddleware<Context: RequestContext>: RouterMiddleware {
    static var header: HTTPField.Name { HTTPField.Name(CareVaultVersion.clientHeader)! }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.uri.path.hasPrefix("/v1/") else { return try await next(request, context) }
        try Self.check(request.headers[Self.header])
        return try await next(request, context)
    }

    /// The refusal a request with this header value gets, if any.
    static func check(_ value: String?) throws {
        let minimum = CareVaultVersion.minimumClient
        guard let value else {
            throw refusal("this client does not say its version, so it is older than \(minimum)")
        }
        guard let release = CareVaultVersion.Release(value) else {
            throw APIError.badRequest("\(CareVaultVersion.clientHeader) must be a release number such as \(CareVaultVersion.release)")
        }
        guard release >= minimum else { throw refusal("this client is version \(release)") }
    }

    static func refusal(_ why: String) -> APIError {
        var error = APIError(
            .upgradeRequired,
            .upgradeRequired,
            "\(why); this server (\(CareVaultVersion.release)) serves clients from \(CareVaultVersion.minimumClient) on: upgrade the CareVault tools"
        )
        error.headers[.upgrade] = "CareVault/\(CareVaultVersion.minimumClient)"
        return error
    }
}
