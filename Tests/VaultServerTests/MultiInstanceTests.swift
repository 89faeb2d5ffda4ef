import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

/// Several instances on one PostgreSQL (Docs/operations.md §6): each with its own pool and its own
/// process state, sharing only the database, as behind a load balancer.
@Suite("Several instances on one PostgreSQL")
struct MultiInstanceTests {
    /// Two repositories over one fresh database, each with a client of its own; the database is dropped after.
    static func twoInstances(_ body: (any VaultRepository, any VaultRepository) async throws -> Void) async throws {
        guard let url = PostgresTestServer.url else {
            try #require(!PostgresTestServer.required, "CAREVAULT_TEST_POSTGRES_URL is not set")
            return
        }
        var logger = Logger(label: "test-instances")
        logger.logLevel = .error
        let name = "cv_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let adminConfig = try PostgresRepository.configuration(url: url)
        let admin = PostgresClient(configuration: adminConfig, backgroundLogger: logger)
        let adminTask = Task { await admin.run() }
        defer { adminTask.cancel() }
        try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
        var config = adminConfig
        config.database = name
        let clients = [
            PostgresClient(configuration: config, backgroundLogger: logger), PostgresClient(configuration: config, backgroundLogger: logger),
        ]
        let tasks = clients.map { c in Task { await c.run() } }
        let repos = clients.map { PostgresRepository(client: $0, logger: logger) }
        // Both start at once, as instances restarted together do: one migrates, the other waits and finds it done.
        async let first: Void = repos[0].migrate()
        async let second: Void = repos[1].migrate()
        _ = try await (first, second)
        do { try await body(repos[0], repos[1]) } catch {
            for t in tasks { t.cancel() }
            throw error
        }
        for t in tasks { t.cancel() }
        for t in tasks { await t.value }
        _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
    }

    static func wrongLogin(_ client: some TestClientProtocol, _ username: String) async throws -> HTTPResponse.Status {
        let body = try JSONEncoder().encode(LoginRequest(username: username, loginKey: Base64URL.encode(RandomBytes.bytes(count: 32))))
        return try await client.execute(
            uri: Routes.login,
            method: .post,
            headers: [.contentType: "application/json", .careVaultClient: CareVaultVersion.release],
            body: ByteBuffer(bytes: body)
        )
        .status
    }

    @Test(.enabled(if: PostgresTestServer.url != nil || PostgresTestServer.required))
    func failedLoginsOnBothInstancesMeetOneLimitAndAnAdminRequestWorksOnce() async throws {
        try await Self.twoInstances { repoA, repoB in
            let admin = SigningKeyPair.generate()
            let clock = TestClock()
            let appA = Application(router: buildRouter(repository: repoA, adminKey: admin.publicKey, clock: clock.function))
            let appB = Application(router: buildRouter(repository: repoB, adminKey: admin.publicKey, clock: clock.function))
            try await appA.test(.router) { a in
                try await appB.test(.router) { b in
                    // The username's three free failures and one more, two on each instance, at the same time.
                    let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                        for i in 0..<4 {
                            group.addTask { i.isMultiple(of: 2) ? try await Self.wrongLogin(a, "mallory") : try await Self.wrongLogin(b, "mallory") }
                        }
                        return try await group.reduce(into: []) { $0.append($1) }
                    }
                    #expect(statuses == Array(repeating: .unauthorized, count: 4))
                    // Each instance alone saw two failures, under the free three; together they saw four.
                    #expect(try await Self.wrongLogin(a, "mallory") == .tooManyRequests)
                    #expect(try await Self.wrongLogin(b, "mallory") == .tooManyRequests)
                    #expect(try await Self.wrongLogin(b, "someone-else") == .unauthorized, "the limit is the username's")

                    // One signed admin request, sent to both instances at once, several times: exactly one is served.
                    let signed = AdminRequestSignature.sign(
                        method: "GET",
                        pathAndQuery: Routes.adminPending,
                        body: [],
                        timestamp: clock.millis,
                        deploymentID: AdminRequestSignature.deploymentID(serverSecret: try await repoA.serverSecret()),
                        adminKey: admin
                    )
                    let headers: HTTPFields = [
                        .careVaultClient: CareVaultVersion.release,
                        HTTPField.Name(AdminRequestSignature.timestampHeader)!: signed.timestamp,
                        HTTPField.Name(AdminRequestSignature.nonceHeader)!: signed.nonce,
                        HTTPField.Name(AdminRequestSignature.signatureHeader)!: signed.signature,
                    ]
                    let replays = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                        for i in 0..<6 {
                            group.addTask {
                                let client: any TestClientProtocol = i.isMultiple(of: 2) ? a : b
                                return try await client.execute(uri: Routes.adminPending, method: .get, headers: headers, body: nil).status
                            }
                        }
                        return try await group.reduce(into: []) { $0.append($1) }
                    }
                    #expect(replays.filter { $0 == .ok }.count == 1, "served once: \(replays)")
                    #expect(replays.filter { $0 == .unauthorized }.count == 5)
                }
            }
        }
    }
}
