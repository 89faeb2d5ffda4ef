import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

/// `/ready` and `/metrics` (Docs/operations.md): readiness follows the database, the metrics are valid
/// Prometheus text whose counters move with requests, and nothing in them names a user.
/// Serialized: the metrics are process-wide, and only this suite asks for /ready.
@Suite("Monitoring: /ready and /metrics", .serialized)
struct MonitoringTests {
    /// Parses Prometheus text exposition: every line is a comment or `name{labels} value`; returns the
    /// samples by their series (`name{labels}` as written).
    static func parse(_ text: String) throws -> [String: Double] {
        let sample = try NSRegularExpression(
            pattern: #"^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})?) (\S+)$"#
        )
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) {
            if line.hasPrefix("# TYPE ") || line.hasPrefix("# HELP ") { continue }
            let range = NSRange(line.startIndex..., in: line)
            let match = try #require(sample.firstMatch(in: line, range: range), "not a Prometheus sample: \(line)")
            let series = String(line[Range(match.range(at: 1), in: line)!])
            let value = String(line[Range(match.range(at: 4), in: line)!])
            // Read as a Double first: assigned straight into the dictionary (a Double? setter), #require would not unwrap.
            let number: Double = try #require(Double(value.replacingOccurrences(of: "+Inf", with: "inf")), "not a number: \(line)")
            samples[series] = number
        }
        return samples
    }

    static func metrics(_ client: some TestClientProtocol) async throws -> (String, [String: Double]) {
        let r = try await client.execute(uri: "/metrics", method: .get, headers: [:], body: nil)
        #expect(r.status == .ok)
        #expect(r.headers[.contentType]?.hasPrefix("text/plain; version=0.0.4") == true)
        let text = String(buffer: r.body)
        return (text, try parse(text))
    }

    static let readySeries = #"carevault_http_requests_total{route="/ready",method="GET",status="200"}"#

    @Test func readyCountsUpByOneAndMetricsNameNoUser() async throws {
        try await APIHarness.run(.sqlite) { api in
            let (_, before) = try await Self.metrics(api.client)
            let ready = try await api.send(.get, "/ready", contentType: nil)
            #expect(ready.status == .ok)
            let body = try JSONSerialization.jsonObject(with: Data(String(buffer: ready.body).utf8)) as? [String: String]
            #expect(body == ["status": "ready", "database": "sqlite"])
            let (_, after) = try await Self.metrics(api.client)
            #expect(after[Self.readySeries] == (before[Self.readySeries] ?? 0) + 1, "one GET /ready, one more in its counter")
            #expect(after.keys.contains { $0.hasPrefix("carevault_http_request_duration_seconds_bucket{route=\"/ready\"") })

            // Requests naming a user, an id and a made-up method: the metrics keep route templates only.
            let secretName = "zelda\(UInt32.random(in: 0..<UInt32.max))"
            _ = try await api.send(.get, Routes.userByName(secretName), contentType: nil)
            let id = UUID().uuidString
            _ = try await api.send(.post, Routes.shareRevoke(id), contentType: nil)
            _ = try await api.send(HTTPRequest.Method("BREW\(UInt16.random(in: 0..<UInt16.max))")!, "/ready", contentType: nil)
            let failuresBefore = after["carevault_login_failures_total"] ?? 0
            _ = try await api.login(secretName, password: "not the password")
            let (text, last) = try await Self.metrics(api.client)
            #expect(!text.contains(secretName) && !text.contains(id) && !text.contains(id.lowercased()), "no username or id in /metrics")
            #expect(!text.contains("BREW"), "an unknown method is reported as OTHER")
            #expect(text.contains(#"method="OTHER""#))
            #expect(last.keys.contains { $0.contains(#"route="/v1/directory/users/"#) }, "the directory lookup is counted under its template")
            #expect((last["carevault_login_failures_total"] ?? 0) >= failuresBefore + 1, "a refused login is counted")
            // Its audit entry went through the batcher: one more transaction, its size and time recorded.
            #expect((last["carevault_audit_batches_total"] ?? 0) >= (after["carevault_audit_batches_total"] ?? 0) + 1)
            #expect((last["carevault_audit_batch_size_count"] ?? 0) >= 1)
            #expect(last.keys.contains { $0.hasPrefix(#"carevault_audit_batch_size_bucket{le="256"#) }, "buckets up to the largest batch")
            #expect((last["carevault_audit_append_duration_seconds_count"] ?? 0) >= 1)
        }
    }

    @Test func pushedAndPulledRecordsAreCounted() async throws {
        try await APIHarness.run(.sqlite) { api in
            let (_, before) = try await Self.metrics(api.client)
            let alice = try await api.user("monitored", role: .patient)
            let pull = try await api.send(.get, Routes.records, token: alice.token, contentType: nil, accept: RecordMediaType.page)
            #expect(pull.status == .ok)
            let (_, after) = try await Self.metrics(api.client)
            #expect(after["carevault_records_pulled_total"] != nil && after["carevault_records_pushed_total"] != nil)
            #expect((after["carevault_records_pulled_total"] ?? -1) >= (before["carevault_records_pulled_total"] ?? 0))
        }
    }

    @Test(
        .enabled(if: ThrowawayPostgres.configured || PostgresTestServer.required, Comment(rawValue: ThrowawayPostgres.missing)),
        .timeLimit(.minutes(2))
    )
    func readyIs503WhileTheDatabaseIsDown() async throws {
        // Destroyed after the body, whether it returns or throws (awaited, so not in a `defer`).
        try await ThrowawayPostgres.with { pg in
            let configuration = ServerConfiguration(port: 0, databaseURL: pg.url, adminKey: SigningKeyPair.generate().publicKey, logLevel: .critical)
            let app = try await buildApplication(configuration)
            try await app.test(.live) { client in
                #expect(try await PostgresOutageTests.answersOK(client, "/ready"), "/ready before the outage")
                try await pg.stopImmediately()
                let down = try await client.execute(uri: "/ready", method: .get)
                #expect(down.status == .serviceUnavailable)
                #expect(down.headers[.retryAfter] == "1")
                let body = try JSONSerialization.jsonObject(with: Data(String(buffer: down.body).utf8)) as? [String: String]
                #expect(body == ["status": "not ready", "database": "postgres", "reason": "database is not reachable"])
                #expect(try await client.execute(uri: "/metrics", method: .get).status == .ok, "/metrics does not need the database")
                // Running again, so that the cluster's teardown (which stops it) succeeds.
                try await pg.startServer()
            }
        }
    }
}
