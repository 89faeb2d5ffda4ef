import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import VaultAPI
import VaultClient

/// Open event streams that only listen (Docs/events.md): the crowd beside the watching doctor in the live
/// section, and the server's memory per stream. Each account may hold 8 streams, so `n` streams take
/// `n / 8` patient accounts (registered, approved and logged in beforehand, outside the measurement).
final class IdleStreams: Sendable {
    private let http: HTTPClient
    private let tasks: NIOLockedValueBox<[Task<Void, Never>]>

    private init(http: HTTPClient, tasks: [Task<Void, Never>]) {
        self.http = http
        self.tasks = NIOLockedValueBox(tasks)
    }

    /// Session tokens for `streams` streams: one per stream, an account's repeated up to its cap.
    static func accounts(_ streams: Int, world: BenchWorld) async throws -> [String] {
        let perAccount = 8
        let names = (0..<((streams + perAccount - 1) / perAccount)).map { "idle-\($0)-\(shortID())" }
        var tokens: [String] = []
        // Four at a time: each registration and login runs Argon2id (64 MiB) in this process.
        for chunk in stride(from: 0, to: names.count, by: 4).map({ Array(names[$0..<min($0 + 4, names.count)]) }) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for name in chunk {
                    group.addTask { _ = try await world.device(name).0.register(username: name, password: BenchWorld.password, role: .patient) }
                }
                try await group.waitForAll()
            }
        }
        try await world.approveAll()
        // One login at a time: an address's concurrent attempts count as failures until each is settled.
        for name in names {
            let account = try await world.device(name).0.login(username: name, password: BenchWorld.password)
            guard let token = account.session?.token else { throw BenchError("no session after login") }
            tokens.append(token)
        }
        return (0..<streams).map { tokens[$0 / perAccount] }
    }

    /// Opens one stream per token and returns once every one has received `ready`.
    static func open(_ tokens: [String], baseURL: String) async throws -> IdleStreams {
        var config = HTTPClient.Configuration()
        config.timeout = .init(connect: .seconds(10), read: .seconds(60))
        config.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: tokens.count + 8)
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
        let ready = NIOLockedValueBox(0)
        let failures = NIOLockedValueBox<[String]>([])
        let tasks = tokens.map { token in
            Task {
                do {
                    var request = HTTPClientRequest(url: baseURL + Routes.events)
                    request.headers.add(name: "Accept", value: "text/event-stream")
                    request.headers.add(name: CareVaultVersion.clientHeader, value: CareVaultVersion.release)
                    request.headers.add(name: "Authorization", value: "Bearer \(token)")
                    let response = try await http.execute(request, timeout: .hours(2))
                    guard response.status == .ok else {
                        failures.withLockedValue { $0.append("status \(response.status.code)") }
                        return
                    }
                    var counted = false
                    var text = ""
                    for try await chunk in response.body {
                        guard !counted else { continue }
                        text += String(buffer: chunk)
                        if text.contains("event: ready") {
                            counted = true
                            ready.withLockedValue { $0 += 1 }
                        }
                    }
                } catch {
                    if !Task.isCancelled { failures.withLockedValue { $0.append("\(error)") } }
                }
            }
        }
        let streams = IdleStreams(http: http, tasks: tasks)
        let deadline = ContinuousClock.now + .seconds(120)
        while ready.withLockedValue({ $0 }) < tokens.count {
            let failed = failures.withLockedValue { $0 }
            if !failed.isEmpty || ContinuousClock.now > deadline {
                await streams.close()
                throw BenchError("\(ready.withLockedValue { $0 }) of \(tokens.count) idle streams opened; failures: \(failed.prefix(3))")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return streams
    }

    /// Ends every stream.
    func close() async {
        let all = tasks.withLockedValue { $0 }
        for t in all { t.cancel() }
        for t in all { await t.value }
        try? await http.shutdown()
    }
}
