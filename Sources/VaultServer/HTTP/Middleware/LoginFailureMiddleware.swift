import Hummingbird
import VaultAPI

/// Counts refused logins for /metrics: a rising count is a password-guessing attempt or a broken client.
/// Only the count is kept, never the username or the address.
struct LoginFailureMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.method == .post, request.uri.path == Routes.login else { return try await next(request, context) }
        do {
            let response = try await next(request, context)
            if Self.isRefusal(response.status) { metrics.loginFailures.increment() }
            return response
        } catch let error as any HTTPResponseError {
            if Self.isRefusal(error.status) { metrics.loginFailures.increment() }
            throw error
        }
    }

    /// Wrong credentials (401) and accounts not allowed in (403); rate limits and outages are not failures of a login.
    static func isRefusal(_ status: HTTPResponse.Status) -> Bool { status == .unauthorized || status == .forbidden }
}
