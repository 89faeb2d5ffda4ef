import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `/metrics` on a listener of its own, on loopback by default, so it stays off the public network when the
/// server does its own TLS (Docs/operations.md §2); `--metrics-address api` keeps it on the API port.
@Suite("Server: /metrics on a loopback listener of its own")
struct MetricsAddressTests {
    /// A running server: its API URL, the metrics URL it printed (nil when none), and the process.
    static func start(_ t: Tools, _ extra: [String]) async throws -> (api: String, metrics: String?, process: ChildProcess) {
        #expect(try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin-\(extra.count)").path]).status == 0)
        let p = ChildProcess()
        p.executableURL = Tools.bin.appendingPathComponent("carevault-server")
        p.arguments =
            ["--admin-key", t.root.appendingPathComponent("admin-\(extra.count)/admin.pub").path, "--port", "0"]
            + ["--database", "sqlite:" + t.root.appendingPathComponent("s-\(extra.count).sqlite").path] + extra
        p.environment = t.env
        let out = t.root.appendingPathComponent("out-\(UUID().uuidString)")
        let err = t.root.appendingPathComponent("err-\(UUID().uuidString)")
        p.standardOutput = try ChildStdio.output(to: out)
        p.standardError = try ChildStdio.output(to: err)
        try p.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let text = (try? String(contentsOf: out, encoding: .utf8)) ?? ""
            let log = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
            if let api = text.range(of: "http://127.0.0.1:[0-9]+", options: .regularExpression) {
                let metrics = log.range(of: "http://127.0.0.1:[0-9]+/metrics", options: .regularExpression)
                if metrics != nil || extra == ["--metrics-address", "api"] {
                    return (String(text[api]), metrics.map { String(log[$0]) }, p)
                }
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        p.signalIfRunning(SIGTERM)
        throw Tools.ToolMissing(path: "carevault-server did not start within 30 s")
    }

    static func get(_ url: String) async throws -> (Int, String) {
        let (body, response) = try await URLSession.shared.data(from: URL(string: url)!)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: body, as: UTF8.self))
    }

    @Test func metricsAreServedOnLoopbackApartFromTheAPI() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let (api, metrics, server) = try await Self.start(t, [])
        defer { server.stopIfRunning() }
        let separate = try #require(metrics, "the server names where /metrics is")
        #expect(try await Self.get(api + "/health").0 == 200)
        #expect(try await Self.get(api + "/metrics").0 == 404, "not on the API port")
        let (status, text) = try await Self.get(separate)
        #expect(status == 200)
        #expect(text.contains("carevault_http_requests_total"), "\(text.prefix(400))")
        #expect(try await Self.get(separate.replacingOccurrences(of: "/metrics", with: "/health")).0 == 404, "only /metrics there")

        let (onAPI, none, other) = try await Self.start(t, ["--metrics-address", "api"])
        defer { other.stopIfRunning() }
        #expect(none == nil)
        #expect(try await Self.get(onAPI + "/metrics").0 == 200, "--metrics-address api keeps it on the API port")

        let bad = try await t.run("carevault-server", ["--admin-key", "x", "--metrics-address", "nowhere"])
        #expect(bad.status == 64 && bad.stderr.contains("--metrics-address must be HOST:PORT or api"), "\(bad.stderr)")
    }
}
