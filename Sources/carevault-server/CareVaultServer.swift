import ArgumentParser
import CAllocator
import Foundation
import Hummingbird
import Logging
import VaultAPI
import VaultCrypto
import VaultServer

/// `carevault-server`: the ciphertext document store (Docs/design.md §6 and §7).
@main
struct CareVaultServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "carevault-server",
        abstract: "Run the CareVault server: stores only ciphertext, routes shares, keeps the audit log.",
        discussion: """
            The server never sees health data or tresor keys. It is configured with the admin's public key,
            which it uses to verify approvals and signed admin requests.

            Example:
              carevault-server --admin-key Keys/admin.pub --database sqlite:data/carevault.sqlite --port 8080
            """,
        version: CareVaultVersion.current
    )

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0 picks a free one).")
    var port = 8080

    @Option(
        help: ArgumentHelp(
            "Database URL: sqlite:PATH or postgres://user:password@host:port/database (env CAREVAULT_DATABASE_URL; "
                + "without either, sqlite:data/carevault.sqlite under the working directory, refused when PG* variables or a PostgreSQL DATABASE_URL are set).",
            valueName: "url"
        )
    )
    var database: String?

    @Option(
        name: .customLong("metrics-address"),
        help: ArgumentHelp(
            "Serve /metrics on a listener of its own at HOST:PORT, or 'api' to serve it on the API port. "
                + "Default: 127.0.0.1 on the API port + 1 (a free port with --port 0).",
            valueName: "address"
        )
    )
    var metricsAddress: String?

    @Option(name: .customLong("admin-key"), help: ArgumentHelp("The pinned admin public key file (env CAREVAULT_ADMIN_KEY).", valueName: "file"))
    var adminKey: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    @Option(name: .customLong("log-format"), help: "text, or json for one JSON object per line (on stderr).")
    var logFormat = "text"

    @Option(
        name: .customLong("tls-cert"),
        help: ArgumentHelp("Serve HTTPS (HTTP/1.1 and HTTP/2) with this PEM certificate chain; needs --tls-key.", valueName: "file")
    )
    var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("The PEM private key of --tls-cert.", valueName: "file"))
    var tlsKey: String?

    @Option(
        name: .customLong("trusted-proxy"),
        help: ArgumentHelp(
            "A reverse proxy's address block (CIDR, repeatable): requests from it name the client in X-Forwarded-For.",
            valueName: "cidr"
        )
    )
    var trustedProxy: [String] = []

    @Option(name: .customLong("header-timeout"), help: ArgumentHelp("Seconds a client has to send a request's headers.", valueName: "seconds"))
    var headerTimeout = 10.0

    @Option(name: .customLong("body-timeout"), help: ArgumentHelp("Seconds a client has to send a request's body.", valueName: "seconds"))
    var bodyTimeout = 120.0

    @Option(name: .customLong("idle-timeout"), help: ArgumentHelp("Seconds an idle connection stays open.", valueName: "seconds"))
    var idleTimeout = 60.0

    @Option(name: .customLong("max-connections"), help: "The most connections open at once; keep it below the descriptor limit.")
    var maxConnections = 512

    @Option(
        name: .customLong("registrations-per-hour"),
        help: ArgumentHelp(
            "Registration attempts one client address may make per hour (a clinic enrolling through one address raises it).",
            valueName: "n"
        )
    )
    var registrationsPerHour = 20

    /// The timeouts and the cap, checked (Docs/operations.md §"Timeouts and connections").
    func limits() throws -> ConnectionLimits {
        func duration(_ seconds: Double, _ flag: String) throws -> Duration {
            guard seconds.isFinite, seconds >= 0.1, seconds <= 86_400 else { throw ValidationError("--\(flag) must be 0.1...86400 seconds") }
            return .milliseconds(Int64((seconds * 1_000).rounded()))
        }
        guard (1...1_000_000).contains(maxConnections) else { throw ValidationError("--max-connections must be 1...1000000") }
        return ConnectionLimits(
            headerTimeout: try duration(headerTimeout, "header-timeout"),
            bodyTimeout: try duration(bodyTimeout, "body-timeout"),
            idleTimeout: try duration(idleTimeout, "idle-timeout"),
            maxConnections: maxConnections
        )
    }

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("unknown log level '\(logLevel)'") }
        guard ["text", "json"].contains(logFormat) else { throw ValidationError("--log-format must be text or json, got '\(logFormat)'") }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together: give both, or neither") }
        guard (0...65_535).contains(port) else { throw ValidationError("port must be 0...65535") }
        _ = try trustedProxies()
        _ = try limits()
        guard (1...1_000_000).contains(registrationsPerHour) else { throw ValidationError("--registrations-per-hour must be 1...1000000") }
        _ = try metricsListener()
    }

    /// Where /metrics is served (Docs/operations.md §2): its own listener on loopback unless told otherwise.
    func metricsListener() throws -> MetricsAddress? {
        guard let metricsAddress else { return MetricsAddress(host: "127.0.0.1", port: port == 0 || port == 65_535 ? 0 : port + 1) }
        if metricsAddress == "api" { return nil }
        guard let address = MetricsAddress(metricsAddress) else {
            throw ValidationError("--metrics-address must be HOST:PORT or api, got '\(metricsAddress)'")
        }
        return address
    }

    /// The `--trusted-proxy` blocks, each checked (a malformed one is a usage error).
    func trustedProxies() throws -> [IPNetwork] {
        try trustedProxy.map { text in
            do { return try IPNetwork(text) } catch { throw ValidationError("--trusted-proxy: \(error)") }
        }
    }

    func run() async throws {
        // One allocator arena per core (at least two), not one per thread (glibc's default): under 64 clients
        // the server's peak went from 84-90 MiB to 67-68 at the same throughput (Docs/benchmarks.md §5).
        // MALLOC_ARENA_MAX, when set, decides.
        _ = carevault_limit_malloc_arenas(Int32(clamping: max(2, ProcessInfo.processInfo.activeProcessorCount)))
        // Before any file is made: the SQLite database and its -wal and -shm files hold key bundles, login
        // verifiers and the server secret, for the server's account alone (Docs/operations.md §4).
        umask(0o077)
        let env = ProcessInfo.processInfo.environment
        guard let keyPath = adminKey ?? env["CAREVAULT_ADMIN_KEY"] else {
            throw ValidationError("the admin public key is required: --admin-key FILE (create one with carevault-admin keygen)")
        }
        let text: String
        do { text = try String(contentsOfFile: keyPath, encoding: .utf8) } catch {
            throw ValidationError("cannot read admin key file '\(keyPath)'")
        }
        let key: SigningPublicKey
        do { key = try SigningPublicKey(base64URL: text.trimmingCharacters(in: .whitespacesAndNewlines)) } catch {
            throw ValidationError("'\(keyPath)' is not an admin public key (expected base64url of 32 bytes)")
        }
        let databaseURL = try DatabaseChoice.url(option: database, environment: env)
        let tls = try checkedTLS()
        try await checkDatabase(databaseURL)
        if logFormat == "json" { LoggingSystem.bootstrap { label in JSONLogHandler(label: label) } }
        // The start-up line names the storage, so a server on the wrong database is seen at once.
        let storage = DatabaseChoice.describe(databaseURL)
        if logFormat == "json" {
            Logger(label: "carevault-server").notice("storage", metadata: ["storage": "\(storage)"])
        } else {
            FileHandle.standardError.write(Data("carevault-server: storage: \(storage)\n".utf8))
        }
        let config = ServerConfiguration(
            host: host,
            port: port,
            databaseURL: databaseURL,
            adminKey: key,
            logLevel: Logger.Level(rawValue: logLevel) ?? .info,
            tls: tls,
            trustedProxies: try trustedProxies(),
            limits: try limits(),
            registrationsPerHour: registrationsPerHour,
            metricsAddress: try metricsListener()
        )
        let app = try await buildApplication(config)
        // runService installs SIGTERM and SIGINT handlers and shuts down gracefully.
        do {
            try await app.runService()
            // After SIGTERM or SIGINT, once the requests in flight are done: the log says the stop was clean.
            Logger(label: "carevault-server").notice("stopped")
        } catch let refusal as DatabaseRefusal {
            FileHandle.standardError.write(Data("carevault-server: error: \(refusal)\nhint: \(refusal.hint)\n".utf8))
            throw ExitCode(refusal.exitStatus)
        }
    }

    /// Connects to PostgreSQL once before starting, so that an unreachable database or a certificate that
    /// is not trusted stops the start in plain words: a URL or TLS setting that cannot work is a usage
    /// error (64), a database that cannot be reached or trusted is 69.
    func checkDatabase(_ url: String) async throws {
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else { return }
        var logger = Logger(label: "carevault-server")
        logger.logLevel = .critical
        do { try await PostgresRepository.checkConnection(url: url, logger: logger) } catch let e as ConfigurationError {
            FileHandle.standardError.write(Data("carevault-server: error: \(e)\n".utf8))
            throw ExitCode(64)
        } catch RepositoryError.unavailable(let reason) {
            FileHandle.standardError.write(Data("carevault-server: error: \(reason)\n".utf8))
            throw ExitCode(69)
        }
    }

    /// The TLS files, checked now: a missing, unreadable or mismatched file is a usage error (64) in plain
    /// words before the server starts, not a failed handshake later.
    func checkedTLS() throws -> TLSFiles? {
        guard let tlsCert, let tlsKey else { return nil }
        let files = TLSFiles(certificateChain: tlsCert, privateKey: tlsKey)
        do { _ = try files.serverConfiguration() } catch let e as ConfigurationError {
            FileHandle.standardError.write(Data("carevault-server: error: \(e)\n".utf8))
            throw ExitCode(64)
        }
        return files
    }
}
