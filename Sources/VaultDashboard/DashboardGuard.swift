import Foundation
import HTTPTypes
import Hummingbird
import VaultCrypto

/// Who may read the dashboard (Docs/dashboard.md "Access"): a request must name the dashboard by its
/// loopback address and port (DNS rebinding), and carry the session cookie, or the token printed at
/// start, which is exchanged for that cookie once.
public struct DashboardAccess: Sendable {
    /// The cookie that carries the token after the exchange.
    public static let cookieName = "carevault_dashboard"

    /// The random token (32 bytes, base64url) printed at start.
    public let token: String
    let port: PortBox

    /// A guard for a fresh random token.
    public init() { self.init(token: Base64URL.encode(RandomBytes.bytes(count: 32))) }

    /// A guard for `token`, on the port set once the server listens.
    public init(token: String) {
        self.token = token
        port = PortBox()
    }

    /// The port the dashboard listens on, once known; until then every request is refused.
    public func listening(on port: Int) { self.port.set(port) }

    /// What to do with one request.
    public enum Verdict: Equatable, Sendable {
        /// The request may be answered.
        case allow
        /// The `Host` is not this dashboard's loopback address and port: refused (403).
        case foreignHost
        /// Neither the cookie nor a valid token: 401.
        case unauthorized
        /// A valid token in the query: answer 303 to `location` with the cookie set.
        case exchange(location: String)
    }

    /// The verdict for a request to `path` with these `Host`, `Cookie` header and `token` query values.
    public func verdict(host: String?, cookie: String?, path: String, queryToken: String?) -> Verdict {
        guard let port = port.value, let host, Self.allowedHosts(port: port).contains(host.lowercased()) else { return .foreignHost }
        if let value = Self.cookieValue(cookie, name: Self.cookieName), Self.same(value, token) { return .allow }
        if let queryToken, Self.same(queryToken, token) { return .exchange(location: Self.localPath(path)) }
        return .unauthorized
    }

    /// `path` when it names a page of this dashboard, else "/": a path such as `//elsewhere.example` would
    /// send the browser to another site after the exchange.
    static func localPath(_ path: String) -> String {
        guard path.hasPrefix("/"), !path.hasPrefix("//"), !path.hasPrefix("/\\"), !path.contains("\n"), !path.contains("\r") else { return "/" }
        return path
    }

    /// The only `Host` values answered: the address the dashboard prints, and its name.
    public static func allowedHosts(port: Int) -> Set<String> { ["127.0.0.1:\(port)", "localhost:\(port)"] }

    /// The value of cookie `name` in a `Cookie` header, if there is exactly one.
    static func cookieValue(_ header: String?, name: String) -> String? {
        guard let header else { return nil }
        let values = header.split(separator: ";").compactMap { pair -> String? in
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == name else { return nil }
            return parts[1].trimmingCharacters(in: .whitespaces)
        }
        return values.count == 1 ? values[0] : nil
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

    /// The `Set-Cookie` value given at the exchange: never readable by a script, never sent by another site.
    public var setCookie: String { "\(Self.cookieName)=\(token); Path=/; HttpOnly; SameSite=Strict" }

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

/// The port, written once when the server listens and read by every request.
final class PortBox: @unchecked Sendable {
    private let lock = NSLock()
    private var port: Int?
    var value: Int? { lock.withLock { port } }
    func set(_ value: Int) { lock.withLock { port = value } }
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
            }
        case .foreignHost:
            response = Self.text(.forbidden, "this dashboard answers only at 127.0.0.1 or localhost on its own port")
        case .unauthorized:
            response = Self.text(.unauthorized, "open the link the dashboard command printed (it holds the token)")
        case let .exchange(location):
            response = Response(status: .seeOther, headers: [.location: location, .setCookie: access.setCookie])
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
