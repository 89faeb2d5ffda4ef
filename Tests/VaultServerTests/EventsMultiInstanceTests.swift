import Foundation
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

/// Live events across two instances on one PostgreSQL (Docs/events.md §7): each instance with its own
/// pool, hub and relay, sharing only the database.
@Suite("Live events across instances")
struct EventsMultiInstanceTests {
    /// Two instances over one fresh database; `cut` ends every other connection to it (as a restart of
    /// the database or a network failure would).
    static func twoInstances(_ body: @escaping @Sendable ([EventsWorld], _ cut: @Sendable () async throws -> Void) async throws -> Void) async throws
    {
        guard let url = PostgresTestServer.url else {
            try #require(!PostgresTestServer.required, "CAREVAULT_TEST_POSTGRES_URL is not set")
            return
        }
        let logger = {
            var l = Logger(label: "test-events")
            l.logLevel = .critical
            return l
        }()
        let name = "cv_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let adminConfig = try PostgresRepository.configuration(url: url)
        let admin = PostgresClient(configuration: adminConfig, backgroundLogger: logger)
        let adminTask = Task { await admin.run() }
        defer { adminTask.cancel() }
        try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
        var config = adminConfig
        config.database = name
        let clients = (0..<2).map { _ in PostgresClient(configuration: config, backgroundLogger: logger) }
        var tasks = clients.map { c in Task { await c.run() } }
        let repos = clients.map { PostgresRepository(client: $0, logger: logger) }
        try await repos[0].migrate()
        // One deployment: the first harness's admin key and clock serve both instances.
        let harnesses = repos.map { APIHarness(repository: $0) }
        let (key, clock) = (harnesses[0].admin, harnesses[0].clock)
        let hubs = [EventHub(), EventHub()]
        for hub in hubs {
            let relay = PostgresEventRelay(
                configuration: PostgresTLS.singleConnection(config, tls: .disable),
                hub: hub,
                logger: logger,
                checkInterval: .milliseconds(200)
            )
            tasks.append(Task { try? await relay.run() })
        }
        let cut: @Sendable () async throws -> Void = {
            let sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(name)' AND pid <> pg_backend_pid()"
            for try await _ in try await admin.query(PostgresQuery(unsafeSQL: sql), logger: logger) {}
        }
        let apps = (0..<2).map { i in
            Application(router: buildRouter(repository: repos[i], adminKey: key.publicKey, clock: clock.function, events: hubs[i]))
        }
        do {
            try await apps[0].test(.router) { a in
                try await apps[1].test(.router) { b in
                    let worlds = [a, b].enumerated().map { i, client in
                        EventsWorld(
                            api: APIClient(client: client, harness: harnesses[i]),
                            hub: hubs[i],
                            service: VaultService(repository: repos[i], adminKey: key.publicKey, clock: clock.function, events: hubs[i])
                        )
                    }
                    try await body(worlds, cut)
                }
            }
        } catch {
            for t in tasks { t.cancel() }
            throw error
        }
        for t in tasks { t.cancel() }
        _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
    }

    @Test(.enabled(if: PostgresTestServer.url != nil || PostgresTestServer.required))
    func aPushOnOneInstanceWakesADoctorOnTheOtherAndACutConnectionTellsItToResync() async throws {
        try await Self.twoInstances { worlds, cut in
            let (a, b) = (worlds[0], worlds[1])
            let (patient, doctor, tresor) = try await a.sharedPair("pat", "doc")
            let watcher = try await b.open(doctor)
            try await watcher.wait("ready") { !$0.named("ready").isEmpty }
            try await a.push(patient, tresor, "walk")
            try await watcher.wait("the change from the other instance") { !$0.named("change").isEmpty }
            // A doctor's change names the owner only (Docs/events.md §3).
            #expect(watcher.named("change").first?.change == ChangeEventData(owner: patient.id, sequence: 0))

            // The database connections are cut: the relay listens again and the watcher is told to resync. A
            // heartbeat that falls in the cut cannot check the session, so that stream ends (Docs/events.md §5)
            // and is resumed from its last id, as a client does, missing nothing.
            let resyncs = watcher.named("resync").count
            var taps = [watcher]
            try await cut()
            try await Self.follow(&taps, b, doctor, "a resync after the cut") { $0.filter { $0.name == "resync" }.count > resyncs }
            #expect(taps.flatMap(\.events).last { $0.name == "resync" }?.reason == "database-reconnected")
            // And the path works again: the next push (retried while the pool recovers) wakes it.
            let changes = taps.flatMap(\.events).filter { $0.name == "change" }.count
            var next: UInt64?
            for _ in 0..<50 where next == nil {
                next = try? await a.push(patient, tresor, "run-\(UUID().uuidString.prefix(4))")
                if next == nil { try await Task.sleep(for: .milliseconds(200)) }
            }
            _ = try #require(next)
            // A doctor's change names the owner only: the next one after the cut is this push's.
            try await Self.follow(&taps, b, doctor, "the change after the cut") { $0.filter { $0.name == "change" }.count > changes }
            #expect(!taps.flatMap(\.events).contains { $0.name == "account" })
            for t in taps { await t.close() }
        }
    }

    /// Waits until `condition` holds over the events of every stream read so far, resuming the last one
    /// from its last id whenever it ended.
    static func follow(
        _ taps: inout [StreamTap],
        _ world: EventsWorld,
        _ user: TestUser,
        _ what: String,
        until condition: ([ReadEvent]) -> Bool
    ) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while !condition(taps.flatMap(\.events)) {
            guard ContinuousClock.now < deadline else {
                Issue.record("timed out waiting for \(what); the streams so far:\n\(taps.map(\.raw).joined(separator: "--\n"))")
                throw CancellationError()
            }
            if taps.last?.hasEnded == true, let id = taps.flatMap(\.events).last(where: { $0.id != nil })?.id,
                let resumed = try? await world.open(user, lastEventID: id)
            {
                taps.append(resumed)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}
