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

    @Test func theVerdictChecksHostBeforeAnythingAndTheTokenInConstantForm() {
        let access = Self.access()
        let cookie = "\(DashboardAccess.cookieName)=\(access.token)"
        #expect(access.verdict(host: "127.0.0.1:\(Self.port)", cookie: cookie, path: "/", queryToken: nil) == .allow)
        #expect(access.verdict(host: "LOCALHOST:\(Self.port)", cookie: "a=b; \(cookie)", path: "/", queryToken: nil) == .allow)
        // DNS rebinding: a name that resolves to 127.0.0.1 is still another origin, even with the cookie.
        #expect(access.verdict(host: "evil.example:\(Self.port)", cookie: cookie, path: "/", queryToken: nil) == .foreignHost)
        #expect(access.verdict(host: "127.0.0.1:\(Self.port + 1)", cookie: cookie, path: "/", queryToken: nil) == .foreignHost)
        #expect(access.verdict(host: "127.0.0.1", cookie: cookie, path: "/", queryToken: nil) == .foreignHost)
        #expect(access.verdict(host: nil, cookie: cookie, path: "/", queryToken: nil) == .foreignHost)
        #expect(access.verdict(host: "127.0.0.1:\(Self.port)", cookie: nil, path: "/", queryToken: nil) == .unauthorized)
        #expect(
            access.verdict(host: "127.0.0.1:\(Self.port)", cookie: "\(DashboardAccess.cookieName)=x", path: "/", queryToken: "y") == .unauthorized
        )
        // A cookie given twice is not guessed between.
        #expect(access.verdict(host: "127.0.0.1:\(Self.port)", cookie: "\(cookie); \(cookie)", path: "/", queryToken: nil) == .unauthorized)
        #expect(
            access.verdict(host: "127.0.0.1:\(Self.port)", cookie: nil, path: "/patient/a", queryToken: access.token)
                == .exchange(location: "/patient/a")
        )
        // The exchange never sends the browser to another site.
        for path in ["//elsewhere.example/x", "/\\elsewhere.example", "", "nothing"] {
            #expect(access.verdict(host: "127.0.0.1:\(Self.port)", cookie: nil, path: path, queryToken: access.token) == .exchange(location: "/"))
        }
        #expect(access.token.count == 43)
        #expect(DashboardAccess().token != access.token)
    }

    @Test func beforeTheServerListensEveryRequestIsRefused() {
        let access = DashboardAccess()
        #expect(access.verdict(host: "127.0.0.1:0", cookie: nil, path: "/", queryToken: access.token) == .foreignHost)
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

    @Test func theTokenIsExchangedForAnHttpOnlyStrictCookieAndEveryPageNeedsIt() async throws {
        let access = DashboardAccess()
        try await Self.app(access).test(.live) { live in
            let port = try #require(live.port)
            access.listening(on: port)
            let host = "127.0.0.1:\(port)"
            try await TestClient.withClient(host: "localhost", port: port) { client in
                // No token: 401, with the headers.
                for path in ["/", "/patient/alice", "/patient/alice/export.csv", "/events", "/static/live.js"] {
                    let response = try await Self.get(client, path, host: host)
                    #expect(response.head.status == .unauthorized, "\(path)")
                    Self.expectSecurityHeaders(response.head.headerFields)
                }
                // A wrong token: 401, and no cookie.
                let wrong = try await Self.get(client, "/?token=nottheone", host: host)
                #expect(wrong.head.status == .unauthorized)
                #expect(wrong.head.headerFields[.setCookie] == nil)
                // The right token: 303 to the same path without it, and the cookie.
                let exchange = try await Self.get(client, "/?token=\(access.token)", host: host)
                #expect(exchange.head.status == .seeOther)
                #expect(exchange.head.headerFields[.location] == "/")
                let set = exchange.head.headerFields[.setCookie] ?? ""
                #expect(set.contains("HttpOnly"))
                #expect(set.contains("SameSite=Strict"))
                #expect(set.contains("Path=/"))
                Self.expectSecurityHeaders(exchange.head.headerFields)
                let cookie = String(set.split(separator: ";").first ?? "")
                #expect(cookie == "\(DashboardAccess.cookieName)=\(access.token)")

                let home = try await Self.get(client, "/", host: host, cookie: cookie)
                #expect(home.head.status == .ok)
                #expect(home.head.headerFields[.contentType]?.hasPrefix("text/html") == true)
                #expect(Self.text(home).contains("alice"))
                Self.expectSecurityHeaders(home.head.headerFields)
                let byName = try await Self.get(client, "/", host: "localhost:\(port)", cookie: cookie)
                #expect(byName.head.status == .ok)

                // A foreign Host is refused even with the cookie (DNS rebinding), and so is a bare one.
                for foreign in ["rebind.example:\(port)", "localhost", "127.0.0.1:\(port + 1)"] {
                    let refused = try await Self.get(client, "/", host: foreign, cookie: cookie)
                    #expect(refused.head.status == .forbidden, "\(foreign)")
                    #expect(!Self.text(refused).contains("alice"))
                    Self.expectSecurityHeaders(refused.head.headerFields)
                }

                // Bad input is a clear 4xx.
                let badSort = try await Self.get(client, "/?sort=nonsense", host: host, cookie: cookie)
                #expect(badSort.head.status == .badRequest)
                #expect(Self.text(badSort).contains("unknown sort order"))
                #expect(try await Self.get(client, "/patient/mallory", host: host, cookie: cookie).head.status == .notFound)
                #expect(try await Self.get(client, "/patient/alice/export.pdf", host: host, cookie: cookie).head.status == .notFound)

                let script = try await Self.get(client, "/static/live.js", host: host, cookie: cookie)
                #expect(script.head.status == .ok)
                #expect(script.head.headerFields[.contentType]?.hasPrefix("text/javascript") == true)
                #expect(Self.text(script).contains("EventSource"))
                let csv = try await Self.get(client, "/patient/alice/export.csv", host: host, cookie: cookie)
                #expect(csv.head.status == .ok)
                #expect(csv.head.headerFields[.contentDisposition]?.hasPrefix("attachment") == true)
            }
        }
    }
}

/// A source with fixed sheets, for driving the router without a CareVault server.
struct FixedSource: DashboardSource {
    var sheets: [PatientSheet]
    var role: DashboardRole { .doctor }
    func triage() async throws -> [PatientSheet] { sheets }
    func sheet(patient: String) async throws -> PatientSheet? { sheets.first { $0.username == patient } }
    func export(patient: String, format: ExportFormat) async throws -> Data? {
        try await sheet(patient: patient).map { _ in Data("activity_id\n".utf8) }
    }
    func follow(changed: @escaping @Sendable () -> Void) async throws {}
}
