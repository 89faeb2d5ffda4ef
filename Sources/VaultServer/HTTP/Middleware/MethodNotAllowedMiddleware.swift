import Hummingbird
import VaultAPI

/// Answers 405 with an `Allow` header when a request names a path the API has but a method it does not
/// serve there (TRACE, OPTIONS, DELETE on /v1/tresors, …); an unknown path stays 404. The router finds
/// no handler in both cases, so this middleware must be added after every route: it then wraps only the
/// router's not-found responder, and sees exactly the requests no route took.
struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    /// A route path split into its segments, `nil` where the route captures a parameter.
    struct Template: Sendable {
        let segments: [Substring?]
        var methods: [HTTPRequest.Method]

        func matches(_ parts: [Substring]) -> Bool {
            parts.count == segments.count && zip(segments, parts).allSatisfy { $0 == nil || $0 == $1 }
        }
    }

    let templates: [Template]

    /// The templates of `routes`, as the router lists them (`/v1/shares/{id}/revoke`).
    init(routes: [Router<Context>.RouteDescription]) {
        var byPath: [String: Template] = [:]
        for route in routes {
            let path = route.path.description
            let segments = path.split(separator: "/").map { $0.first == "{" ? nil : $0 }
            byPath[path, default: Template(segments: segments, methods: [])].methods.append(route.method)
        }
        templates = byPath.keys.sorted().compactMap { byPath[$0] }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // The router splits paths the same way: empty segments (a trailing or doubled slash) do not count.
        let parts = request.uri.path.split(separator: "/")
        guard let template = templates.first(where: { $0.matches(parts) }) else { return try await next(request, context) }
        let allowed = template.methods.map(\.rawValue).sorted().joined(separator: ", ")
        var error = APIError(.methodNotAllowed, .badRequest, "method \(request.method.rawValue) is not allowed here; allowed: \(allowed)")
        error.headers[.allow] = allowed
        throw error
    }
}
