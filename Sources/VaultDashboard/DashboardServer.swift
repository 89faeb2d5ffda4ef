import Foundation
import HTTPTypes
import Hummingbird
import Logging
import VaultCLI
import VaultClient

/// The dashboard's HTTP server (Docs/dashboard.md): pages rendered from `source`, behind `DashboardGuard`,
/// on 127.0.0.1 only.
public enum DashboardServer {
    /// The router with every route, for the tool and for tests that drive it without a socket.
    public static func router(source: some DashboardSource, access: DashboardAccess, live: LiveChanges) -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: DashboardGuard(access: access))
        let base = access.prefix
        router.get("\(base)/") { request, _ in
            switch source.role {
            case .doctor:
                let name = request.uri.queryParameters["sort"].map(String.init) ?? TriageList.Order.attention.rawValue
                guard let order = TriageList.Order(rawValue: name) else {
                    let known = TriageList.Order.allCases.map(\.rawValue).joined(separator: ", ")
                    throw HTTPError(.badRequest, message: "unknown sort order (known: \(known))")
                }
                let sheets = try await answer { try await source.triage() }
                return html(
                    DashboardPages.triage(TriageList(sheets.sheets, order: order), role: .doctor, base: base + "/", unverified: sheets.unverified)
                )
            case .patient:
                guard let sheet = try await answer({ try await (source as? PatientDashboardSource)?.own() }) else {
                    throw HTTPError(.notFound)
                }
                return html(DashboardPages.patient(sheet, role: .patient, base: base + "/"))
            }
        }
        router.get("\(base)/patient/:name") { _, context in
            let name = try context.parameters.require("name")
            guard let sheet = try await answer({ try await source.sheet(patient: name) }) else {
                throw HTTPError(.notFound, message: "no patient of that name shares with you")
            }
            return html(DashboardPages.patient(sheet, role: source.role, base: base + "/"))
        }
        router.get("\(base)/patient/:name/:file") { _, context in
            let name = try context.parameters.require("name")
            let file = try context.parameters.require("file")
            guard let format = ExportFormat.allCases.first(where: { "export.\($0.fileExtension)" == file }) else { throw HTTPError(.notFound) }
            guard let data = try await answer({ try await source.export(patient: name, format: format) }) else {
                throw HTTPError(.notFound, message: "no patient of that name shares with you")
            }
            let filename = "\(DashboardPaths.segment(name))-\(format.rawValue).\(format == .csv ? "csv" : "json")"
            return Response(
                status: .ok,
                headers: [.contentType: format.contentType, .contentDisposition: "attachment; filename=\"\(filename)\""],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: data))
            )
        }
        router.get("\(base)/static/live.js") { _, _ in asset(DashboardAssets.liveScript, type: "text/javascript; charset=utf-8") }
        router.get("\(base)/static/dashboard.css") { _, _ in asset(DashboardAssets.styleSheet, type: "text/css; charset=utf-8") }
        router.get("\(base)/events") { _, _ in
            let (id, stream) = await live.subscribe()
            return Response(
                status: .ok,
                headers: [.contentType: "text/event-stream; charset=utf-8"],
                body: ResponseBody { writer in
                    defer { Task { await live.unsubscribe(id) } }
                    try await writer.write(ByteBuffer(string: "retry: 1000\n\n"))
                    for await version in stream {
                        let text = version == 0 ? ": keep-alive\n\n" : "event: change\ndata: \(version)\n\n"
                        try await writer.write(ByteBuffer(string: text))
                    }
                    try await writer.finish(nil)
                }
            )
        }
        return router
    }

    /// Serves until the process ends: prints `dashboard: URL` first on stdout once listening, and follows
    /// the live updates meanwhile. `opened` is called with the URL (for --open); what it returns is run
    /// once the URL's token has been exchanged.
    public static func run(
        source: some DashboardSource,
        port: Int,
        tool: String,
        opened: @escaping @Sendable (String) -> @Sendable () -> Void = { _ in {} }
    ) async throws {
        let access = DashboardAccess()
        let live = LiveChanges()
        var logger = Logger(label: "carevault-dashboard")
        logger.logLevel = .error
        let app = Application(
            router: router(source: source, access: access, live: live),
            configuration: .init(address: .hostname("127.0.0.1", port: port), serverName: nil),
            onServerRunning: { channel in
                let bound = channel.localAddress?.port ?? port
                access.listening(on: bound)
                let url = access.link(port: bound)
                FileHandle.standardOutput.write(Data("dashboard: \(url)\n".utf8))
                access.whenExchanged(opened(url))
            },
            logger: logger
        )
        let follower = Task {
            do { try await source.follow { Task { await live.changed() } } } catch {
                Output.note("\(tool): live updates stopped: \(ClientError.from(error).description); pages still answer, reload them by hand")
            }
        }
        let keepAlive = Task {
            while !Task.isCancelled {
                try await Task.sleep(for: .seconds(15))
                await live.ping()
            }
        }
        defer {
            follower.cancel()
            keepAlive.cancel()
        }
        try await app.runService(gracefulShutdownSignals: [])
    }

    static func html(_ text: String) -> Response {
        Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8"], body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func asset(_ text: String, type: String) -> Response {
        Response(status: .ok, headers: [.contentType: type], body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    /// Runs a read of the user's view; the client's failures become answers that say what went wrong.
    static func answer<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let refused as ExportRefused {
            throw HTTPError(.badGateway, message: refused.message)
        } catch let error as ClientError {
            switch error {
            case .serverUnreachable, .temporary: throw HTTPError(.serviceUnavailable, message: error.description)
            case .notPermitted: throw HTTPError(.forbidden, message: error.description)
            case .notFound: throw HTTPError(.notFound, message: error.description)
            default: throw HTTPError(.badGateway, message: error.description)
            }
        }
    }
}

/// Tells every open page that something changed: each `/events` stream gets a growing version number
/// (0 is a keep-alive). Changes are coalesced: pages hear at most one per `interval` (each makes every open
/// page reload), and a change inside it is told when it ends, never dropped.
public actor LiveChanges {
    private var version = 0
    private var next = 0
    private var subscribers: [Int: AsyncStream<Int>.Continuation] = [:]
    private let interval: Duration
    private var lastSent: ContinuousClock.Instant?
    private var pending = false

    public init(interval: Duration = .seconds(1)) { self.interval = interval }

    /// A new stream of change versions, and its id for `unsubscribe`.
    public func subscribe() -> (Int, AsyncStream<Int>) {
        next += 1
        let id = next
        let (stream, continuation) = AsyncStream<Int>.makeStream(bufferingPolicy: .bufferingNewest(4))
        subscribers[id] = continuation
        return (id, stream)
    }

    public func unsubscribe(_ id: Int) { subscribers.removeValue(forKey: id)?.finish() }

    /// Something this machine pulled and stored changed what a page shows.
    public func changed() {
        guard let last = lastSent, ContinuousClock.now - last < interval else { return send() }
        guard !pending else { return }
        pending = true
        Task {
            try? await Task.sleep(until: last + interval)
            await flush()
        }
    }

    private func flush() {
        pending = false
        send()
    }

    private func send() {
        lastSent = .now
        version += 1
        for c in subscribers.values { c.yield(version) }
    }

    func ping() { for c in subscribers.values { c.yield(0) } }

    /// How many pages are listening.
    public var listeners: Int { subscribers.count }
}
