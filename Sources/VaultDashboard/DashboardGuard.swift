import Foundation
import HTTPTypes
import Hummingbird
import VaultCrypto

/// Who may read the dashboard (Docs/dashboard.md "Access"): a request must name the dashboard by its
/// loopback address and port (DNS rebinding), ask for a path under this run's random prefix, and carry
/// the session cookie, or the token printed at start, which is exchanged once for that cookie.
public struct DashboardAccess: Sendable {
    /// The random token (32 bytes, base64url) printed at start; good for one exchange only.
    public let token: String
    /// The cookie's value: another 32 random bytes, never printed and never in a URL.
    let secret: String
    /// This run's path prefix, `/s/RANDOM`: every page lives under it, and the cookie is sent only there.
    public let prefix: String
    let state: AccessState

    /// A guard with fresh random secrets.
    public init() {
        self.init(
            token: Base64URL.encode(RandomBytes.bytes(count: 32)),
            secret: Base64URL.encode(RandomBytes.bytes(count: 32)),
            prefix: "/s/" + Base64URL.encode(RandomBytes.bytes(count: 16))
        )
    }

    /// A guard for these values, on the port set once the server listens.
    init(token: String, secret: String, prefix: String) {
        self.token = token
        self.secret = secret
        self.prefix = prefix
        state = AccessState()
    }

    /// The port the dashboard listens on, once known; until then every request is refused.
    public func listening(on port: Int) { state.set(port: port) }

    /// Runs `action` once the token has been exchanged (the --open file holding it is then removed).
    public func whenExchanged(_ action: @escaping @Sendable () -> Void) { state.whenExchanged(action) }

    func exchanged() { state.exchanged() }

    /// The link to print: the prefix, and the one-time token.
    public func link(port: Int) -> String { "http://127.0.0.1:\(port)\(prefix)/?token=\(token)" }

    /// The cookie's name: it holds the port, so two dashboards on one machine never overwrite each other's.
    public static func cookieName(port: Int) -> String { "carevault_dashboard_\(port)" }

    /// What to do with one request.
    public enum Verdict: Equatable, Sendable {
        /// The request may be answered.
        case allow
        /// The `Host` is not this dashboard's loopback address and port: refused (403).
        case foreignHost
        /// The path is not under this run's prefix: 404, whatever else the request carries.
        case outside
        /// Neither the cookie nor a valid token: 401.
        case unauthorized
        /// The token, for the first time: answer 303 to `location` with the cookie set.
        case exchange(location: String)
    }

    /// The verdict for a request to `path` with these `Host`, `Cookie` header and `token` query values.
    /// A valid token is used up by the verdict that exchanges it: a second request with it is 401.
    public func verdict(host: String?, cookie: String?, path: String, queryToken: String?) -> Verdict {
        guard let port = state.port, let host, host.lowercased() == Self.allowedHost(port: port) else { return .foreignHost }
        guard path == prefix || path.hasPrefix(prefix + "/") else { return .outside }
        // Every value of the name is checked: another local server can make the browser send a second cookie
        // of this name beside ours, and only the real one holds the secret.
        if Self.cookieValues(cookie, name: Self.cookieName(port: port)).contains(where: { Self.same($0, secret) }) { return .allow }
        if let queryToken, Self.same(queryToken, token), state.useToken() { return .exchange(location: localPath(path)) }
        return .unauthorized
    }

    /// `path` when it names a page of this dashboard, else the prefix's home: a path such as
    /// `//elsewhere.example` would send the browser to another site after the exchange.
    func localPath(_ path: String) -> String {
        guard path.hasPrefix(prefix + "/") || path == prefix, !path.contains("\n"), !path.contains("\r"), !path.contains("\\")
        else { return prefix + "/" }
        return path
    }

    /// The only `Host` answered: the address the dashboard prints and listens on. `localhost` is refused:
    /// it may name ::1, where another user could listen on the same port.
    public static func allowedHost(port: Int) -> String { "127.0.0.1:\(port)" }

    /// The values of cookie `name` in a `Cookie` header (a browser sends one per path that matches).
    static func cookieValues(_ header: String?, name: String) -> [String] {
        guard let header else { return [] }
        return header.split(separator: ";").compactMap { pair -> String? in
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == name else { return nil }
            return parts[1].trimmingCharacters(in: .whitespaces)
        }
    }

    /// Compares without stopping at the first different byte, so the time taken tells nothing of the token.
    static func same(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for i in x.indices { difference |= x[i] ^ y[i] }
        return difference == 0
    }

    /// The `Set-Cookie` value given at the exchange: the secret, never the token; never readable by a
    /// script, never sent by another site, and sent only under this run's prefix.
    public func setCookie(port: Int) -> String { "\(Self.cookieName(port: port))=\(secret); Path=\(prefix)/; HttpOnly; SameSite=Strict" }

    /// The headers of every answer: nothing from another origin, no inline script, no framing, no caching,
    /// no referrer (the first URL holds the token).
    public static let securityHeaders: [(HTTPField.Name, String)] = [
        (
            .contentSecurityPolicy,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
                + "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        ),
        (HTTPField.Name("X-Frame-Options")!, "DENY"),
        (HTTPField.Name("X-Content-Type-Options")!, "nosniff"),
        (HTTPField.Name("Referrer-Policy")!, "no-referrer"),
        (HTTPField.Name("Cross-Origin-Opener-Policy")!, "same-origin"),
        (HTTPField.Name("Cross-Origin-Resource-Policy")!, "same-origin"),
        (.cacheControl, "no-store"),
    ]
}

/// The port, written once when the server listens and read by every request, and whether the token
/// was used.
final class AccessState: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int?
    private var used = false
    var port: Int? { lock.withLock { value } }
    func set(port: Int) { lock.withLock { value = port } }
    /// True once only: the first caller uses the token up.
    func useToken() -> Bool {
        lock.withLock {
            defer { used = true }
            return !used
        }
    }
    var tokenUsed: Bool { lock.withLock { used } }
    private var onExchange: (@Sendable () -> Void)?
    func whenExchanged(_ action: @escaping @Sendable () -> Void) { lock.withLock { onExchange = action } }
    func exchanged() { lock.withLock { onExchange }?() }
}

/// The middleware in front of every route: `DashboardAccess`'s verdict, and the security headers on
/// every answer, refusals included.
struct DashboardGuard<Context: RequestContext>: RouterMiddleware {
    let access: DashboardAccess

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let host = request.head.authority ?? request.headers[HTTPField.Name("Host")!]
        let verdict = access.verdict(
            host: host,
            cookie: request.headers[.cookie],
            path: request.uri.path,
            queryToken: request.uri.queryParameters["token"].map(String.init)
        )
        var response: Response
        switch verdict {
        case .allow:
            do { response = try await next(request, context) } catch let error as HTTPError {
                response = DashboardGuard.text(error.status, error.body ?? error.status.reasonPhrase)
            } catch {
                // Anything else is the dashboard's own fault: said plainly, with the headers like every answer.
                response = DashboardGuard.text(.internalServerError, "the dashboard could not build this page")
            }
        case .foreignHost:
            response = Self.text(.forbidden, "this dashboard answers only at 127.0.0.1 on its own port")
        case .outside:
            response = Self.text(.notFound, "not a page of this dashboard")
        case .unauthorized:
            response = Self.text(.unauthorized, "open the link the dashboard command printed (it holds the token)")
        case let .exchange(location):
            response = Response(status: .seeOther, headers: [.location: location, .setCookie: access.setCookie(port: access.state.port ?? 0)])
            access.exchanged()
        }
        for (name, value) in DashboardAccess.securityHeaders { response.headers[name] = value }
        return response
    }

    static func text(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(
            status: status,
            headers: [.contentType: "text/plain; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text + "\n"))
        )
    }
}
