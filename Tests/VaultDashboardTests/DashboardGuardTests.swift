import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultCore

@testable import VaultDashboard

/// The dashboard's HTTP guard (Docs/dashboard.md "Access"): the Host check against DNS rebinding, the
/// token exchanged once for an HttpOnly SameSite=Strict cookie, 401 without it, and the security headers
/// on every answer, refusals included.
@Suite("Dashboard: HTTP guard")
struct DashboardGuardTests {
    static let port = 48_123

    static func access() -> DashboardAccess {
        let access = DashboardAccess()
        access.listening(on: port)
        return access
    }

    @Test func theVerdictChecksHostThenPrefixThenCookieAndUsesTheTokenOnce() {
        let access = Self.access()
        let home = access.prefix + "/"
        let host = "127.0.0.1:\(Self.port)"
        let name = DashboardAccess.cookieName(port: Self.port)
        let cookie = "\(name)=\(access.secret)"
        #expect(name == "carevault_dashboard_\(Self.port)")
        #expect(access.prefix.hasPrefix("/s/") && access.prefix.count > 20)
        #expect(access.verdict(host: host, cookie: cookie, path: home, queryToken: nil) == .allow)
        #expect(access.verdict(host: host, cookie: "a=b; \(cookie)", path: home + "patient/a", queryToken: nil) == .allow)
        // The cookie holds the secret, never the token; another port's cookie name is not this one's.
        #expect(access.verdict(host: host, cookie: "\(name)=\(access.token)", path: home, queryToken: nil) == .unauthorized)
        let otherPort = "\(DashboardAccess.cookieName(port: Self.port + 1))=\(access.secret)"
        #expect(access.verdict(host: host, cookie: otherPort, path: home, queryToken: nil) == .unauthorized)
        // Only 127.0.0.1 on this port: localhost may name ::1, where another user could listen.
        for foreign in [
            "localhost:\(Self.port)", "LOCALHOST:\(Self.port)", "[::1]:\(Self.port)", "evil.example:\(Self.port)",
            "127.0.0.1:\(Self.port + 1)", "127.0.0.1",
        ] {
            #expect(access.verdict(host: foreign, cookie: cookie, path: home, queryToken: nil) == .foreignHost, "\(foreign)")
        }
        #expect(access.verdict(host: nil, cookie: cookie, path: home, queryToken: nil) == .foreignHost)
        // Outside the run's prefix nothing is answered, cookie or token.
        for path in ["/", "/patient/a", "/static/live.js", "/s/", "/s/other/", access.prefix + "x/", "//elsewhere.example/x"] {
            #expect(access.verdict(host: host, cookie: cookie, path: path, queryToken: access.token) == .outside, "\(path)")
        }
        #expect(access.verdict(host: host, cookie: nil, path: home, queryToken: nil) == .unauthorized)
        #expect(access.verdict(host: host, cookie: "\(name)=x", path: home, queryToken: "y") == .unauthorized)
        // A cookie of the same name planted by another local server (Path=/) does not lock the owner out, in
        // either order, and on its own opens nothing.
        #expect(access.verdict(host: host, cookie: "\(cookie); \(name)=planted", path: home, queryToken: nil) == .allow)
        #expect(access.verdict(host: host, cookie: "\(name)=planted; \(cookie)", path: home, queryToken: nil) == .allow)
        #expect(access.verdict(host: host, cookie: "\(name)=planted; \(name)=other", path: home, queryToken: nil) == .unauthorized)
        // The token works once; the second request with it is 401.
        #expect(
            access.verdict(host: host, cookie: nil, path: home + "patient/a", queryToken: access.token) == .exchange(location: home + "patient/a")
        )
        #expect(access.verdict(host: host, cookie: nil, path: home, queryToken: access.token) == .unauthorized)
        #expect(access.token.count == 43)
        #expect(access.secret.count == 43)
        #expect(access.secret != access.token)
        let other = DashboardAccess()
        #expect(other.token != access.token && other.prefix != access.prefix && other.secret != access.secret)
        #expect(access.link(port: Self.port) == "http://127.0.0.1:\(Self.port)\(access.prefix)/?token=\(access.token)")
    }

    @Test func theExchangeNeverLeavesThePrefix() {
        for path in ["/\\elsewhere.example", "\r\nLocation: x"] {
            let access = Self.access()
            #expect(access.localPath(access.prefix + path) == access.prefix + "/")
        }
    }

    @Test func beforeTheServerListensEveryRequestIsRefused() {
        let access = DashboardAccess()
        #expect(access.verdict(host: "127.0.0.1:0", cookie: nil, path: access.prefix + "/", queryToken: access.token) == .foreignHost)
    }

    @Test func portsBelow1024AreAUsageError() throws {
        for port in [1, 80, 443, 1023, -1, 65_536] {
            #expect(throws: (any Error).self, "\(port)") { try DashboardOptions.parse(["--port", "\(port)"]) }
        }
        for port in [0, 1024, 8080, 65_535] { #expect(try DashboardOptions.parse(["--port", "\(port)"]).port == port) }
    }

    @Test func openHandsTheBrowserAPrivateFileNeverTheURL() throws {
        let url = "http://127.0.0.1:5000/s/abc/?token=secret&x=\"y"
        let file = try OpenFile.write(url: url)
        let dir = file.deletingLastPathComponent().path
        let fileMode = try #require(try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int)
        let dirMode = try #require(try FileManager.default.attributesOfItem(atPath: dir)[.posixPermissions] as? Int)
        #expect(fileMode == 0o600)
        #expect(dirMode == 0o700)
        let text = try String(contentsOf: file, encoding: .utf8)
        #expect(text.contains("http-equiv=\"refresh\" content=\"0;url=http://127.0.0.1:5000/s/abc/?token=secret&amp;x=&quot;y\""))
        OpenFile.remove()
        #expect(!FileManager.default.fileExists(atPath: file.path))
        #expect(!FileManager.default.fileExists(atPath: dir))
    }

    static func app(_ access: DashboardAccess) -> some ApplicationProtocol {
        let sheet = PatientSheet(
            username: "alice",
            categories: ["interventions"],
            activities: [],
            outcomes: [],
            lastChange: 1,
            asOf: 1,
            integrity: .verified
        )
        return Application(router: DashboardServer.router(source: FixedSource(sheets: [sheet]), access: access, live: LiveChanges()))
    }

    static func expectSecurityHeaders(_ headers: HTTPFields) {
        let csp = headers[.contentSecurityPolicy] ?? ""
        #expect(csp.contains("default-src 'none'"))
        #expect(csp.contains("script-src 'self'"))
        #expect(!csp.contains("unsafe-inline"))
        #expect(csp.contains("frame-ancestors 'none'"))
        #expect(headers[HTTPField.Name("X-Frame-Options")!] == "DENY")
        #expect(headers[.cacheControl] == "no-store")
        #expect(headers[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
        #expect(headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
    }

    /// A GET over a real socket with this `Host` (the request's authority) and cookie.
    static func get(_ client: TestClient, _ path: String, host: String, cookie: String? = nil) async throws -> TestClient.Response {
        var headers: HTTPFields = [:]
        if let cookie { headers[.cookie] = cookie }
        return try await client.execute(TestClient.Request(path, method: .get, authority: host, headers: headers))
    }

    static func text(_ response: TestClient.Response) -> String { response.body.map { String(buffer: $0) } ?? "" }

    @Test func theTokenIsExchangedOnceForAPrefixedCookieAndEveryPageNeedsIt() async throws {
        let access = DashboardAccess()
        try await Self.app(access).test(.live) { live in
            let port = try #require(live.port)
            access.listening(on: port)
            let host = "127.0.0.1:\(port)"
            let base = access.prefix
            try await TestClient.withClient(host: "localhost", port: port) { client in
                // No token: 401, with the headers.
                for path in ["/", "/patient/alice", "/patient/alice/export.csv", "/events", "/static/live.js"] {
                    let response = try await Self.get(client, base + path, host: host)
                    #expect(response.head.status == .unauthorized, "\(path)")
                    Self.expectSecurityHeaders(response.head.headerFields)
                }
                // Outside the prefix: 404, even with the token, which stays unused.
                let outside = try await Self.get(client, "/?token=\(access.token)", host: host)
                #expect(outside.head.status == .notFound)
                #expect(outside.head.headerFields[.setCookie] == nil)
                Self.expectSecurityHeaders(outside.head.headerFields)
                // A wrong token: 401, and no cookie.
                let wrong = try await Self.get(client, base + "/?token=nottheone", host: host)
                #expect(wrong.head.status == .unauthorized)
                #expect(wrong.head.headerFields[.setCookie] == nil)
                // The right token: 303 to the same path without it, and the cookie for the prefix only.
                let exchange = try await Self.get(client, base + "/?token=\(access.token)", host: host)
                #expect(exchange.head.status == .seeOther)
                #expect(exchange.head.headerFields[.location] == base + "/")
                let set = exchange.head.headerFields[.setCookie] ?? ""
                #expect(set.contains("HttpOnly"))
                #expect(set.contains("SameSite=Strict"))
                #expect(set.contains("Path=\(base)/;"))
                Self.expectSecurityHeaders(exchange.head.headerFields)
                let cookie = String(set.split(separator: ";").first ?? "")
                #expect(cookie == "carevault_dashboard_\(port)=\(access.secret)")
                #expect(!set.contains(access.token))
                // The token is used up: a second exchange (a link copied from the terminal or a process list) is 401.
                let again = try await Self.get(client, base + "/?token=\(access.token)", host: host)
                #expect(again.head.status == .unauthorized)
                #expect(again.head.headerFields[.setCookie] == nil)

                let home = try await Self.get(client, base + "/", host: host, cookie: cookie)
                #expect(home.head.status == .ok)
                #expect(home.head.headerFields[.contentType]?.hasPrefix("text/html") == true)
                let page = Self.text(home)
                #expect(page.contains("alice"))
                // Every link on the page stays under the prefix.
                #expect(page.contains("href=\"\(base)/patient/alice\""))
                #expect(page.contains("src=\"\(base)/static/live.js\""))
                #expect(page.contains("data-events=\"\(base)/events\""))
                #expect(!page.contains("href=\"/patient") && !page.contains("href=\"/static"))
                Self.expectSecurityHeaders(home.head.headerFields)
                #expect(try await Self.get(client, "/", host: host, cookie: cookie).head.status == .notFound)

                // A foreign Host is refused even with the cookie (DNS rebinding), and so are localhost and a bare one.
                for foreign in ["rebind.example:\(port)", "localhost:\(port)", "localhost", "127.0.0.1:\(port + 1)"] {
                    let refused = try await Self.get(client, base + "/", host: foreign, cookie: cookie)
                    #expect(refused.head.status == .forbidden, "\(foreign)")
                    #expect(!Self.text(refused).contains("alice"))
                    Self.expectSecurityHeaders(refused.head.headerFields)
                }

                // Bad input is a clear 4xx.
                let badSort = try await Self.get(client, base + "/?sort=nonsense", host: host, cookie: cookie)
                #expect(badSort.head.status == .badRequest)
                #expect(Self.text(badSort).contains("unknown sort order"))
                #expect(try await Self.get(client, base + "/patient/mallory", host: host, cookie: cookie).head.status == .notFound)
                #expect(try await Self.get(client, base + "/patient/alice/export.pdf", host: host, cookie: cookie).head.status == .notFound)

                let script = try await Self.get(client, base + "/static/live.js", host: host, cookie: cookie)
                #expect(script.head.status == .ok)
                #expect(script.head.headerFields[.contentType]?.hasPrefix("text/javascript") == true)
                #expect(Self.text(script).contains("EventSource(document.body.dataset.events)"))
                let csv = try await Self.get(client, base + "/patient/alice/export.csv", host: host, cookie: cookie)
                #expect(csv.head.status == .ok)
                #expect(csv.head.headerFields[.contentDisposition]?.hasPrefix("attachment") == true)

                // A view that failed its check exports nothing: 502 with the reason, never an empty file.
                for format in ["csv", "fhir.json"] {
                    let refused = try await Self.get(client, base + "/patient/kept/export.\(format)", host: host, cookie: cookie)
                    #expect(refused.head.status == .badGateway, "\(format)")
                    #expect(refused.head.headerFields[.contentDisposition] == nil)
                    #expect(refused.head.headerFields[.contentType]?.hasPrefix("text/plain") == true)
                    #expect(Self.text(refused).contains("2 records of kept were not shown"))
                }
                // Any other failure is a 500 that says so, with the headers like every answer.
                let broken = try await Self.get(client, base + "/patient/broken", host: host, cookie: cookie)
                #expect(broken.head.status == .internalServerError)
                #expect(Self.text(broken).contains("could not build this page"))
                Self.expectSecurityHeaders(broken.head.headerFields)
            }
        }
    }

    @Test func twoDashboardsOnOneMachineKeepTheirOwnCookies() {
        let a = DashboardAccess()
        let b = DashboardAccess()
        a.listening(on: 50_001)
        b.listening(on: 50_002)
        let setA = a.setCookie(port: 50_001)
        let setB = b.setCookie(port: 50_002)
        #expect(setA.hasPrefix("carevault_dashboard_50001=\(a.secret);") && setA.contains("Path=\(a.prefix)/;"))
        #expect(setB.hasPrefix("carevault_dashboard_50002=\(b.secret);") && setB.contains("Path=\(b.prefix)/;"))
        // A browser holding both cookies sends both to each: each dashboard picks its own.
        let both = "carevault_dashboard_50001=\(a.secret); carevault_dashboard_50002=\(b.secret)"
        #expect(a.verdict(host: "127.0.0.1:50001", cookie: both, path: a.prefix + "/", queryToken: nil) == .allow)
        #expect(b.verdict(host: "127.0.0.1:50002", cookie: both, path: b.prefix + "/", queryToken: nil) == .allow)
    }
}

/// A source with fixed sheets, for driving the router without a CareVault server. Patient `kept` has a
/// view that failed its check; reading patient `broken` fails with an error that is not an HTTP one.
struct FixedSource: DashboardSource {
    struct Broken: Error {}
    var sheets: [PatientSheet]
    var unverified = 0
    var role: DashboardRole { .doctor }
    func triage() async throws -> Triage { Triage(sheets: sheets, unverified: unverified) }
    func sheet(patient: String) async throws -> PatientSheet? {
        if patient == "broken" { throw Broken() }
        if patient == "kept" { return .unreadable(username: "kept", categories: [], lastChange: nil, problem: "2 records of kept were not shown") }
        return sheets.first { $0.username == patient }
    }
    func export(patient: String, format: ExportFormat) async throws -> Data? {
        if patient == "kept" { throw ExportRefused(message: "2 records of kept were not shown") }
        return try await sheet(patient: patient).map { _ in Data("activity_id\n".utf8) }
    }
    func follow(changed: @escaping @Sendable () -> Void) async throws {}
}
