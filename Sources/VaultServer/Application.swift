import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import Logging
import PostgresNIO
import ServiceLifecycle
import VaultAPI
import VaultCore
import VaultCrypto

/// Everything `carevault-server` is configured with (Docs/design.md §7).
public struct ServerConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// `sqlite:PATH` or `postgres://user:password@host:port/database`.
    public var databaseURL: String
    /// The pinned admin public key.
    public var adminKey: SigningPublicKey
    public var logLevel: Logger.Level
    /// Serve HTTPS (HTTP/1.1 and HTTP/2 through ALPN) with these files; plain HTTP when `nil`.
    public var tls: TLSFiles?
    /// Reverse proxies whose `X-Forwarded-For` names the client (Docs/operations.md §3); none by default.
    public var trustedProxies: [IPNetwork]
    /// Header, body and idle timeouts and the connection cap (Docs/operations.md §"Timeouts and connections").
    public var limits: ConnectionLimits
    /// Registration attempts one client address may make per hour (Docs/operations.md §3).
    public var registrationsPerHour: Int
    /// Where `GET /metrics` is served on a listener of its own (Docs/operations.md §2); nil: on the API port.
    public var metricsAddress: MetricsAddress?

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        databaseURL: String = "sqlite:data/carevault.sqlite",
        adminKey: SigningPublicKey,
        logLevel: Logger.Level = .info,
        tls: TLSFiles? = nil,
        trustedProxies: [IPNetwork] = [],
        limits: ConnectionLimits = .init(),
        registrationsPerHour: Int = 20,
        metricsAddress: MetricsAddress? = nil
    ) {
        self.metricsAddress = metricsAddress
        self.host = host
        self.port = port
        self.databaseURL = databaseURL
        self.adminKey = adminKey
        self.logLevel = logLevel
        self.tls = tls
        self.trustedProxies = trustedProxies
        self.limits = limits
        self.registrationsPerHour = registrationsPerHour
    }
}

/// A repository for a database URL, and the service (the PostgreSQL pool) the application must run.
public func makeRepository(databaseURL: String, logger: Logger) throws -> (any VaultRepository, (any Service)?) {
    if databaseURL.hasPrefix("sqlite:") {
        let path = String(databaseURL.dropFirst("sqlite:".count))
        guard !path.isEmpty else { throw ConfigurationError.invalid("sqlite: needs a path, e.g. sqlite:data/carevault.sqlite") }
        return (try SQLiteRepository(path: path), nil)
    }
    if databaseURL.hasPrefix("postgres://") || databaseURL.hasPrefix("postgresql://") {
        let pool = try PostgresPool(url: databaseURL, logger: logger)
        return (PostgresRepository(pool: pool, logger: logger), pool)
    }
    throw ConfigurationError.invalid("unsupported database URL: use sqlite:PATH or postgres://user:password@host:port/database")
}

/// Builds the application for `configuration`: repository, migrations before the server starts, router.
public func buildApplication(_ configuration: ServerConfiguration) async throws -> some ApplicationProtocol {
    let logger = {
        var l = Logger(label: "carevault-server")
        l.logLevel = configuration.logLevel
        return l
    }()
    // The certificate and key are checked before anything else, so a bad file stops the start at once.
    let server = try configuration.limits.serverBuilder(tls: try configuration.tls?.serverConfiguration())
    let scheme = configuration.tls == nil ? "http" : "https"
    let (repository, service) = try makeRepository(databaseURL: configuration.databaseURL, logger: logger)
    let events = EventHub(limits: .init(perInstance: max(1, configuration.limits.maxConnections / 2)))
    let router = buildRouter(
        repository: repository,
        adminKey: configuration.adminKey,
        trustedProxies: configuration.trustedProxies,
        events: events,
        registrationsPerHour: configuration.registrationsPerHour,
        servesMetrics: configuration.metricsAddress == nil
    )
    var app = Application(
        router: router,
        server: server,
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port),
            serverName: "carevault",
            availableConnectionsDelegate: MaximumAvailableConnections(configuration.limits.maxConnections, logger: logger)
        ),
        onServerRunning: { channel in
            // Scripts and tests read this line to learn the port (useful with --port 0).
            let port = channel.localAddress?.port ?? configuration.port
            let line = "carevault-server: listening on \(scheme)://\(configuration.host):\(port)\n"
            FileHandle.standardOutput.write(Data(line.utf8))
        },
        logger: logger
    )
    if let service { app.addServices(service) }
    if let address = configuration.metricsAddress { app.addServices(metricsApplication(address, logger: logger)) }
    app.addServices(events)
    app.addServices(RetentionService(repository: repository, logger: logger))
    if let relay = try PostgresEventRelay(databaseURL: configuration.databaseURL, hub: events, logger: logger) { app.addServices(relay) }
    app.beforeServerStarts {
        // Each migration this start applies is logged (an upgrade says what it changed in the database).
        let before = (try? await repository.appliedMigrations()) ?? []
        try await repository.migrate()
        let now = try await repository.appliedMigrations().subtracting(before)
        let order = Schema.migrations(repository.backendName == "postgres" ? .postgres : .sqlite).map(\.id)
        for name in order where now.contains(name) { logger.notice("applied migration", metadata: ["migration": "\(name)"]) }
        logger.info("storage ready", metadata: ["backend": "\(repository.backendName)"])
    }
    return app
}

/// The router with every route of the API over `repository` (tests build it with any repository, and may
/// pass the audit batcher to count its transactions).
/// Three groups carry the access rules (Docs/design.md §6): open routes, routes behind a session, and
/// /v1/admin behind the admin's request signature; a controller per area fills them.
public func buildRouter(
    repository: any VaultRepository,
    adminKey: SigningPublicKey,
    clock: @escaping @Sendable () -> UnixMillis = { Date().unixMillis },
    trustedProxies: [IPNetwork] = [],
    events: EventHub = EventHub(),
    registrationsPerHour: Int = 20,
    servesMetrics: Bool = true,
    auditBatcher: AuditBatcher? = nil
) -> Router<VaultRequestContext> {
    let service = VaultService(
        repository: repository,
        adminKey: adminKey,
        clock: clock,
        registrationLimits: .init(perAddress: registrationsPerHour),
        events: events,
        auditBatcher: auditBatcher
    )
    // Before any metric exists: the first use of `shared` sets the process's metrics backend.
    let metrics = ServerMetrics.shared
    let router = Router(context: VaultRequestContext.self)
    // First, so that every later step (rate limits, the audit log) sees the forwarded client address.
    router.add(middleware: ForwardedAddressMiddleware(trustedProxies: trustedProxies))
    router.add(middleware: ErrorMiddleware())
    // Inside ErrorMiddleware, so a refusal is counted under the status the client receives.
    router.add(middleware: MetricsMiddleware())
    router.add(middleware: LoginFailureMiddleware(metrics: metrics))
    router.add(middleware: LogRequestsMiddleware(.debug))
    // Before every route group: an older client is told to upgrade, whatever it asked (Docs/design.md §8).
    router.add(middleware: ClientVersionMiddleware())
    // A retried POST or PUT with an Idempotency-Key gets its first answer (Docs/design.md §6.2), claimed
    // after authentication; on session routes a retry that the first try's logout or deletion left without
    // a session is answered, reading only, before it.
    let open = router.group().add(middleware: IdempotencyMiddleware(service: service, scope: .open))
    let session = router.group().add(middleware: EndedSessionReplay(service: service))
        .add(middleware: SessionAuthenticator(service: service))
        .add(middleware: IdempotencyMiddleware(service: service, scope: .session))
    let admin = router.group().add(middleware: AdminSignatureAuthenticator(service: service))
        .add(middleware: IdempotencyMiddleware(service: service, scope: .admin))
    HealthController(service: service).addRoutes(to: open)
    MonitoringController(service: service, metrics: metrics).addRoutes(to: open, metrics: servesMetrics)
    AccountController(service: service).addRoutes(to: open, authenticated: session)
    TresorController(service: service).addRoutes(to: session)
    ShareController(service: service).addRoutes(to: session)
    EventsController(service: service).addRoutes(to: session)
    AdminController(service: service).addRoutes(to: admin)
    // Last, so that it wraps only the not-found responder (see the middleware).
    router.add(middleware: MethodNotAllowedMiddleware(routes: router.routes))
    return router
}
