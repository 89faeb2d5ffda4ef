import Foundation
import Logging
import PostgresNIO
import Testing
import VaultTestSupport

@testable import VaultServer

#if canImport(Glibc)
import Glibc
#endif

/// `sslmode` and `sslrootcert` in the database URL (Docs/operations.md §1): what they mean, their
/// defaults, and a real cluster with a certificate from a throwaway CA.
@Suite("PostgreSQL over TLS", .serialized)
struct PostgresTLSTests {
    static let openssl = ["/usr/bin/openssl", "/usr/local/bin/openssl"].first { FileManager.default.isExecutableFile(atPath: $0) }

    static func tls(_ url: String) throws -> PostgresTLS { try PostgresRepository.settings(url: url).1 }

    @Test func theDefaultDependsOnWhetherTheHostIsLoopback() throws {
        for host in ["127.0.0.1", "127.8.9.1", "localhost", "[::1]"] {
            #expect(try Self.tls("postgres://u@\(host):5432/db").mode == .disable, "\(host)")
        }
        for host in ["db.example", "10.0.0.5", "[2001:db8::5]", "localhost.example", "128.0.0.1"] {
            #expect(try Self.tls("postgres://u@\(host)/db") == PostgresTLS(mode: .verifyFull), "\(host)")
        }
        #expect(try Self.tls("postgres://u@127.0.0.1/db?sslmode=require").mode == .require)
        #expect(try Self.tls("postgres://u@db.example/db?sslmode=disable").mode == .disable)
        #expect(try Self.tls("postgres://u@db.example/db?sslrootcert=system") == PostgresTLS(mode: .verifyFull))
    }

    @Test func settingsThatCannotBeHonouredAreRefusedInPlainWords() throws {
        let cases = [
            ("sslmode=prefer", "sslmode=prefer is not supported"),
            ("sslmode=verify-ca", "use one of disable, require, verify-full"),
            ("sslmode=require&sslrootcert=/etc/ca.pem", "only used with sslmode=verify-full"),
            ("sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "cannot be read as PEM certificates"),
            ("sslmode=verify-full&sslrootcert=/dev/null", "cannot be read as PEM certificates"),
        ]
        for (query, message) in cases {
            #expect(
                "\(query)",
                performing: { _ = try PostgresRepository.configuration(url: "postgres://u@db.example/db?\(query)") },
                throws: { error in
                    "\(error)".contains(message)
                }
            )
        }
    }

    /// Runs openssl in `dir` (file names relative to it), waited for off the pool (`ChildProcess.run`).
    static func openssl(_ args: [String], in dir: String) async throws {
        let absolute = args.map { $0.hasSuffix(".pem") || $0.hasSuffix(".key") || $0.hasSuffix(".csr") || $0.hasSuffix(".cnf") ? "\(dir)/\($0)" : $0 }
        let tool = try #require(openssl)
        try #require(await ChildProcess.run([tool] + absolute) == 0, "openssl \(args.joined(separator: " "))")
    }

    /// A throwaway CA and two certificates it signed, one for 127.0.0.1 and one for another name, with
    /// keys the cluster's account owns (PostgreSQL refuses a key others can read).
    static func makePKI(in dir: String, owner: String?) async throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        chmod(dir, 0o755)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try await openssl(["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=CareVault test CA", "-days", "2"], in: dir)
        for (name, san) in [("server", "IP:127.0.0.1"), ("other", "DNS:db.elsewhere.example"), ("named", "DNS:localhost")] {
            try Data("subjectAltName=\(san)\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n".utf8)
                .write(to: URL(fileURLWithPath: "\(dir)/\(name).cnf"))
            try await openssl(["req"] + ec + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name)"], in: dir)
            try await openssl(
                [
                    "x509", "-req", "-in", "\(name).csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "\(name).pem",
                    "-days", "2", "-extfile", "\(name).cnf",
                ],
                in: dir
            )
            chmod("\(dir)/\(name).key", 0o600)
            chmod("\(dir)/\(name).pem", 0o644)
            if let owner, let account = getpwnam(owner) { chown("\(dir)/\(name).key", account.pointee.pw_uid, account.pointee.pw_gid) }
        }
    }

    static var logger: Logger {
        var l = Logger(label: "test-postgres-tls")
        l.logLevel = .critical
        return l
    }

    /// The connection's reason for failing, or nil when it connected.
    static func failure(_ url: String) async -> String? {
        do {
            try await PostgresRepository.checkConnection(url: url, logger: logger)
            return nil
        } catch RepositoryError.unavailable(let reason) {
            return reason
        } catch {
            return "unexpected \(error)"
        }
    }

    /// Whether the pooled connection of `url` is encrypted, as the server sees it.
    static func pooledConnectionIsEncrypted(_ url: String) async throws -> Bool {
        let client = PostgresClient(configuration: try PostgresRepository.configuration(url: url), backgroundLogger: logger)
        let task = Task { await client.run() }
        defer { task.cancel() }
        for try await ssl in try await client.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", logger: logger).decode(Bool.self) {
            return ssl
        }
        return false
    }

    /// Points the cluster at certificate `name` and turns TLS on (both reloadable without a restart), and
    /// returns once the postmaster has reloaded: a new session's `pg_conf_load_time()` is later than before.
    static func useCertificate(_ name: String, pki: String, url: String) async throws {
        let before = try await configurationLoadTime(url)
        let client = PostgresClient(configuration: try PostgresRepository.configuration(url: url), backgroundLogger: logger)
        let task = Task { await client.run() }
        defer { task.cancel() }
        for statement in [
            "ALTER SYSTEM SET ssl_cert_file = '\(pki)/\(name).pem'", "ALTER SYSTEM SET ssl_key_file = '\(pki)/\(name).key'",
            "ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()",
        ] {
            try await client.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        // The reload is the postmaster's, after pg_reload_conf returns; new sessions see it once it is done.
        let deadline = ContinuousClock.now + .seconds(60)
        while try await configurationLoadTime(url) <= before {
            guard ContinuousClock.now < deadline else { throw ReloadNotSeen() }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    struct ReloadNotSeen: Error, CustomStringConvertible {
        var description: String { "PostgreSQL did not reload its configuration within 60 s" }
    }

    /// `pg_conf_load_time()` of a new session, in microseconds since the epoch.
    static func configurationLoadTime(_ url: String) async throws -> Int64 {
        var config = try PostgresRepository.configuration(url: url)
        config.options.maximumConnections = 1
        let client = PostgresClient(configuration: config, backgroundLogger: logger)
        let task = Task { await client.run() }
        defer { task.cancel() }
        let query = "SELECT (extract(epoch FROM pg_conf_load_time()) * 1000000)::int8"
        for try await value in try await client.query(PostgresQuery(unsafeSQL: query), logger: logger).decode(Int64.self) { return value }
        return 0
    }

    @Test(
        .enabled(if: ThrowawayPostgres.configured || PostgresTestServer.required, Comment(rawValue: ThrowawayPostgres.missing)),
        .enabled(if: openssl != nil, "needs openssl (Scripts/setup installs it)"),
        .timeLimit(.minutes(2))
    )
    func aRealClusterWithAPrivateCA() async throws {
        // Destroyed after the body, whether it returns or throws (awaited, so not in a `defer`).
        try await ThrowawayPostgres.with { pg in
            let pki = "\(pg.directory)/pki"
            try await Self.makePKI(in: pki, owner: pg.runAs)
            let verified = "\(pg.url)?sslmode=verify-full&sslrootcert=\(pki)/ca.pem"

            let plain = await Self.failure(verified)
            #expect(plain?.contains("does not offer TLS, which sslmode=verify-full requires") == true, "\(plain ?? "connected")")

            try await Self.useCertificate("server", pki: pki, url: pg.url)
            let connected1 = await Self.failure(verified)
            #expect(connected1 == nil, "\(connected1 ?? "")")
            // verify-full as libpq means it: the certificate names the host as given. One for IP:127.0.0.1 only is
            // refused for localhost, though that name leads to that address (NIOSSL alone accepts it).
            let byName = verified.replacingOccurrences(of: "@127.0.0.1:", with: "@localhost:")
            #expect(byName != verified)
            let ipOnly = await Self.failure(byName)
            #expect(ipOnly?.contains("is not issued for localhost (it names IP:127.0.0.1") == true, "\(ipOnly ?? "connected")")
            #expect(try await Self.pooledConnectionIsEncrypted(verified))
            let untrusted = await Self.failure("\(pg.url)?sslmode=verify-full")
            #expect(untrusted?.contains("is not trusted: give the CA that issued it with sslrootcert=FILE") == true, "\(untrusted ?? "connected")")
            let connected2 = await Self.failure("\(pg.url)?sslmode=require")
            #expect(connected2 == nil, "\(connected2 ?? "")")
            #expect(try await Self.pooledConnectionIsEncrypted("\(pg.url)?sslmode=require"))
            #expect(try await !Self.pooledConnectionIsEncrypted(pg.url), "loopback defaults to disable")

            // A certificate the same CA issued for another name is refused: verify-full checks the host.
            try await Self.useCertificate("other", pki: pki, url: pg.url)
            let wrongName = await Self.failure(verified)
            #expect(wrongName?.contains("is not issued for 127.0.0.1") == true, "\(wrongName ?? "connected")")
            let connected3 = await Self.failure("\(pg.url)?sslmode=require")
            #expect(connected3 == nil, "require does not check the name: \(connected3 ?? "")")
            // Refused; the names come from a second handshake made only to read them, which a loaded machine
            // may not finish in time (the refusal stands either way).
            let otherByName = await Self.failure(byName) ?? "connected"
            #expect(otherByName.contains("is not issued for localhost"), "\(otherByName)")
            #expect(!otherByName.contains("(it names") || otherByName.contains("(it names DNS:db.elsewhere.example"), "\(otherByName)")
            // One that names localhost is taken under that name: the check speaks PostgreSQL's SSL request.
            try await Self.useCertificate("named", pki: pki, url: pg.url)
            let connected4 = await Self.failure(byName)
            #expect(connected4 == nil, "\(connected4 ?? "")")
        }
    }
}
