import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import PostgresNIO
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

#if canImport(Glibc)
import Glibc
#endif

/// A PostgreSQL cluster of the test's own, which it may stop and start without disturbing the tests
/// that share the cluster of Scripts/with-postgres. Needs the variables that script exports.
struct ThrowawayPostgres {
    static let environment = ProcessInfo.processInfo.environment
    static var binDirectory: String? { environment["CAREVAULT_TEST_POSTGRES_BIN"] }
    static var configured: Bool { binDirectory != nil }
    static let missing = "needs CAREVAULT_TEST_POSTGRES_BIN: run the tests through Scripts/with-postgres"

    let bin: String
    let runAs: String?
    let directory: String
    let port: Int
    var url: String { "postgres://postgres@127.0.0.1:\(port)/postgres" }

    /// Starts a cluster, runs `body` on it, then destroys the cluster whether `body` returned or threw (an
    /// explicit cleanup, awaited: a `defer` cannot await, and a synchronous wait there would hold a thread of
    /// the cooperative pool for as long as `pg_ctl stop` takes).
    static func with<T>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (ThrowawayPostgres) async throws -> T
    ) async throws -> T {
        let pg = try await start()
        let result: T
        do {
            result = try await body(pg)
        } catch {
            await pg.destroy()
            throw error
        }
        await pg.destroy()
        return result
    }

    /// Initialises a cluster in a new temporary folder and starts it on a free port (`with` destroys it after
    /// use; this destroys it when it does not start).
    private static func start() async throws -> ThrowawayPostgres {
        let bin = try #require(binDirectory, Comment(rawValue: missing))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-outage-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let runAs = environment["CAREVAULT_TEST_POSTGRES_RUN_AS"]
        if let runAs, let account = getpwnam(runAs) {
            chmod(directory, 0o755)
            chown(directory, account.pointee.pw_uid, account.pointee.pw_gid)
        }
        let pg = ThrowawayPostgres(bin: bin, runAs: runAs, directory: directory, port: try freePort())
        do {
            try await pg.run("initdb", ["-D", "\(directory)/data", "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            try await pg.startServer()
        } catch {
            await pg.destroy()
            throw error
        }
        return pg
    }

    /// A port nobody listens on now: the kernel's pick for a socket bound to port 0.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        try #require(bound, "binding a socket to find a free port")
        return Int(UInt16(bigEndian: address.sin_port))
    }

    func startServer() async throws {
        let options = "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off"
        try await run("pg_ctl", ["-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "60", "-o", options, "start"])
    }

    /// Kills the cluster as a crash or a pulled cable would: no goodbye to the clients.
    func stopImmediately() async throws {
        try await run("pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "stop"])
    }

    /// Stops the cluster (if it runs) and removes its folder; waited for without holding a thread of the pool.
    func destroy() async {
        _ = await ChildProcess.run(command("pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "stop"]))
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs a PostgreSQL tool (as `runAs` when given, since PostgreSQL refuses to run as root).
    ///
    /// posix_spawn rather than Foundation's Process: Process learns that a child ended through a file
    /// descriptor the child inherits, and the server `pg_ctl start` leaves behind inherits it too, so
    /// waiting for `pg_ctl` would last as long as the server.
    /// Waited for off the test's pool (`ChildProcess.run`): `pg_ctl start` takes seconds on a loaded
    /// machine, and the in-process servers of the suites beside this one need the pool meanwhile.
    func run(_ tool: String, _ arguments: [String]) async throws {
        try #require(await ChildProcess.run(command(tool, arguments)) == 0, "\(tool) \(arguments.last ?? "") failed")
    }

    /// The command line of `tool`, through runuser when it must not run as root.
    func command(_ tool: String, _ arguments: [String]) -> [String] {
        let command = ["\(bin)/\(tool)"] + arguments
        return runAs.map { ["runuser", "-u", $0, "--"] + command } ?? command
    }
}

/// A database outage is a prompt 503 with Retry-After, and the end of one is noticed at once
/// (Docs/design.md §7): the server must not hang requests on a pool that cannot connect.
@Suite("PostgreSQL outage: prompt 503, immediate recovery")
struct PostgresOutageTests {
    /// `path` asked as its route expects: login parameters are a POST with a username, the rest a GET.
    static func request(_ client: some TestClientProtocol, _ path: String) async throws -> (TestResponse, Duration) {
        let started = ContinuousClock.now
        let body = ByteBuffer(string: #"{"username":"someone"}"#)
        let r =
            path == Routes.loginParameters
            ? try await client.execute(
                uri: path,
                method: .post,
                headers: [.contentType: "application/json", .careVaultClient: CareVaultVersion.release],
                body: body
            )
            : try await client.execute(uri: path, method: .get, headers: [.careVaultClient: CareVaultVersion.release], body: nil)
        return (r, ContinuousClock.now - started)
    }

    /// Whether `path` answers 200 within 30 seconds of the server starting. A fresh server on a loaded
    /// two-core machine may still be making its first connections (each may take longer than the 2 s
    /// the health check allows); that start is not what these tests measure, the outage is.
    static func answersOK(_ client: some TestClientProtocol, _ path: String) async throws -> Bool {
        let started = ContinuousClock.now
        while ContinuousClock.now - started < .seconds(30) {
            if try await request(client, path).0.status == .ok { return true }
            try await Task.sleep(for: .milliseconds(200))
        }
        return false
    }

    /// When a fresh connection to `url` first answers `SELECT 1`, and how long that connection and query took
    /// (what the server's own check of the database costs on this machine at this moment).
    static func databaseAnswers(_ url: String) async throws -> (ContinuousClock.Instant, Duration) {
        let (configuration, tls) = try PostgresRepository.settings(url: url)
        let single = PostgresTLS.singleConnection(configuration, tls: try tls.connectionTLS())
        let logger = Logger(label: "outage-test")
        for _ in 0..<300 {
            let started = ContinuousClock.now
            if let conn = try? await PostgresConnection.connect(configuration: single, id: 1, logger: logger) {
                defer { Task { try? await conn.close() } }
                if (try? await conn.query("SELECT 1", logger: logger)) != nil { return (.now, .now - started) }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("PostgreSQL did not take connections within 30 seconds of starting")
        return (.now, .zero)
    }

    @Test(
        .enabled(if: ThrowawayPostgres.configured || PostgresTestServer.required, Comment(rawValue: ThrowawayPostgres.missing)),
        .timeLimit(.minutes(2))
    )
    func outageIsAPrompt503AndRecoveryIsImmediate() async throws {
        // Destroyed after the body, whether it returns or throws (awaited, so not in a `defer`).
        try await ThrowawayPostgres.with { pg in
            let configuration = ServerConfiguration(
                host: "127.0.0.1",
                port: 0,
                databaseURL: pg.url,
                adminKey: SigningKeyPair.generate().publicKey,
                logLevel: .critical
            )
            let app = try await buildApplication(configuration)
            try await app.test(.live) { client in
                for path in [Routes.health, Routes.loginParameters] {
                    #expect(try await Self.answersOK(client, path), "\(path) before the outage")
                }
                try await pg.stopImmediately()
                // Every request, the first one included, is refused promptly and says when to retry.
                for attempt in 0..<4 {
                    for path in [Routes.loginParameters, Routes.health] {
                        let (r, took) = try await Self.request(client, path)
                        #expect(r.status == .serviceUnavailable, "\(path), attempt \(attempt)")
                        #expect(Int(r.headers[.retryAfter] ?? "") ?? 0 >= 1, "\(path) says when to retry")
                        // Far below postgres-nio's own 60 s queue; seconds on a loaded two-core machine.
                        #expect(took < .seconds(10), "\(path) answered in \(took)")
                    }
                }
                // Long enough for postgres-nio's own reconnection back-off to have grown past seconds.
                try await Task.sleep(for: .seconds(3))
                try await pg.startServer()
                // Measured from when the database itself takes a new connection again, so that a loaded machine
                // (slow to start and connect) does not count against the server.
                let (back, check) = try await Self.databaseAnswers(pg.url)
                var answered = false
                while !answered && ContinuousClock.now - back < .seconds(30) {
                    answered = try await Self.request(client, Routes.loginParameters).0.status == .ok
                    if !answered { try await Task.sleep(for: .milliseconds(100)) }
                }
                let recovery = ContinuousClock.now - back
                // What a connection and a query take on this machine now, measured again after the recovery: a
                // loaded machine is slower at some moments than at others, and the server's tries are as slow.
                let (_, checkAfter) = try await Self.databaseAnswers(pg.url)
                let slowest = max(check, checkAfter)
                // postgres-nio's own back-off would be several seconds by now; the watch retries every 250 ms, each
                // try a connection and a query (as long as `slowest` took here; seconds on a loaded machine).
                #expect(
                    answered && recovery < .seconds(3) + slowest * 2,
                    "answers again \(recovery) after PostgreSQL takes connections again (a connection and a query took \(check), then \(checkAfter))"
                )
                #expect(try await Self.request(client, Routes.health).0.status == .ok)
            }
        }
    }
}
