import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO
import ServiceLifecycle

/// Carries event notices between instances on one PostgreSQL (Docs/events.md §7) over a dedicated
/// connection outside the request pool: it `LISTEN`s on `carevault_events` and hands what it hears to
/// the hub, and announces this instance's notices with `pg_notify` (every instance hears them, this one
/// included). A lost connection is found by the notification stream ending or a `SELECT 1` every two
/// seconds failing; the relay then reconnects, listens again and tells its streams to resync. A notice
/// that could not be announced is followed, once announcing works again, by a resync for every instance.
final class PostgresEventRelay: Service, Sendable {
    static let channel = "carevault_events"

    /// The connection closed or stopped answering.
    struct Lost: Error {}

    private struct State {
        var connection: PostgresConnection?
        var failed = false
    }

    private let configuration: PostgresConnection.Configuration
    private let hub: EventHub
    private let logger: Logger
    private let outbox: AsyncStream<EventNotice>
    private let state = NIOLockedValueBox(State())
    /// How often the connection is checked, and how long a check may take.
    let checkInterval: Duration
    let checkDeadline: Duration

    /// The relay for a PostgreSQL URL; nil for SQLite, whose events stay in the process.
    convenience init?(databaseURL: String, hub: EventHub, logger: Logger) throws {
        guard databaseURL.hasPrefix("postgres://") || databaseURL.hasPrefix("postgresql://") else { return nil }
        let (config, tls) = try PostgresRepository.settings(url: databaseURL)
        self.init(configuration: PostgresTLS.singleConnection(config, tls: try tls.connectionTLS()), hub: hub, logger: logger)
    }

    /// A relay over `configuration`; from now on the hub publishes through it.
    init(
        configuration: PostgresConnection.Configuration,
        hub: EventHub,
        logger: Logger,
        checkInterval: Duration = .seconds(2),
        checkDeadline: Duration = .seconds(5)
    ) {
        self.configuration = configuration
        self.hub = hub
        self.logger = logger
        self.checkInterval = checkInterval
        self.checkDeadline = checkDeadline
        let (stream, continuation) = AsyncStream.makeStream(of: EventNotice.self, bufferingPolicy: .bufferingNewest(4_096))
        outbox = stream
        hub.setRelay { notice in
            // A notice dropped from a full outbox is covered like a failed announcement.
            if case .dropped = continuation.yield(notice) { self.markFailed() }
        }
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.announce() }
                group.addTask { await self.listen() }
            }
        }
        if let conn = state.withLockedValue({ $0.connection }) { try? await conn.close() }
    }

    private func markFailed() { state.withLockedValue { $0.failed = true } }

    /// Announces the hub's notices in order, on the listening connection.
    private func announce() async {
        for await notice in outbox {
            guard let conn = state.withLockedValue({ $0.connection }) else {
                markFailed()
                continue
            }
            do {
                try await announceFailuresFirst(conn)
                try await notify(conn, notice.payload)
            } catch {
                markFailed()
                logger.warning("could not announce an event to the other instances; they will be told to resync")
            }
        }
    }

    /// After a failed announcement: a resync for every instance before anything else.
    private func announceFailuresFirst(_ conn: PostgresConnection) async throws {
        guard state.withLockedValue({ $0.failed }) else { return }
        try await notify(conn, EventNotice.resync(reason: "publish-failed").payload)
        state.withLockedValue { $0.failed = false }
    }

    private func notify(_ conn: PostgresConnection, _ payload: String) async throws {
        let rows = try await conn.query("SELECT pg_notify(\(Self.channel), \(payload))", logger: logger)
        for try await _ in rows {}
    }

    /// Listens until cancelled, reconnecting after a loss with a growing wait (250 ms to 2 s).
    private func listen() async {
        var wait = Duration.milliseconds(250)
        var lost = false
        while !Task.isCancelled {
            var opened: PostgresConnection?
            do {
                let conn = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
                opened = conn
                try await conn.listen(on: Self.channel) { notifications in
                    state.withLockedValue { $0.connection = conn }
                    // Whatever was announced while this instance was not listening is covered.
                    hub.deliver(.resync(reason: "database-reconnected"))
                    if lost { logger.notice("listening for events again") }
                    wait = .milliseconds(250)
                    try? await announceFailuresFirst(conn)
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            for try await n in notifications {
                                if let notice = EventNotice(payload: n.payload) { self.hub.deliver(notice) }
                            }
                        }
                        group.addTask { try await self.watch(conn) }
                        try await group.next()
                        group.cancelAll()
                    }
                }
            } catch {
                if !lost { logger.error("lost the event connection to PostgreSQL; reconnecting") }
            }
            state.withLockedValue { $0.connection = nil }
            // Closed on every path, also when cancelled (a connection must be closed before it is released);
            // in a task of its own, since a cancelled close may not complete.
            if let opened { Task { try? await opened.close() } }
            lost = true
            if (try? await Task.sleep(for: wait)) == nil { return }
            wait = min(wait * 2, .seconds(2))
        }
    }

    /// Returns (throwing) when `conn` closes or a `SELECT 1` does not answer in time.
    private func watch(_ conn: PostgresConnection) async throws {
        let logger = self.logger
        while !conn.isClosed {
            try await Task.sleep(for: checkInterval)
            let check = Task { () -> Bool in
                do {
                    for try await _ in try await conn.query("SELECT 1", logger: logger) {}
                    return true
                } catch { return false }
            }
            guard await Deadline.value(of: check, within: checkDeadline) == true else { break }
        }
        Task { try? await conn.close() }
        throw Lost()
    }
}
