import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle
import VaultCore
import VaultCrypto
import VaultServer

/// A real CareVault server (the router `carevault-server` serves) running in this process on
/// 127.0.0.1 and a free port, over a given repository.
final class BenchServer: Sendable {
    let baseURL: String
    let port: Int
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    private init(port: Int, group: ServiceGroup, task: Task<Void, any Error>) {
        self.port = port
        self.baseURL = "http://127.0.0.1:\(port)"
        self.group = group
        self.task = task
    }

    /// Starts the server and returns once it listens. The repository must be migrated.
    static func start(repository: any VaultRepository, adminKey: SigningPublicKey) async throws -> BenchServer {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "carevault-bench-server")
        logger.logLevel = .error
        let app = Application(
            router: buildRouter(repository: repository, adminKey: adminKey),
            configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: "carevault"),
            onServerRunning: { channel in
                continuation.yield(channel.localAddress?.port ?? 0)
                continuation.finish()
            },
            logger: logger
        )
        let group = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
        let task = Task {
            defer { continuation.finish() }
            try await group.run()
        }
        var iterator = ports.makeAsyncIterator()
        let port = await iterator.next() ?? 0
        guard port > 0 else {
            task.cancel()
            let outcome = await task.result
            if case let .failure(error) = outcome { throw error }
            throw BenchError("the in-process server did not start")
        }
        return BenchServer(port: port, group: group, task: task)
    }

    /// Shuts the server down gracefully (in-flight requests finish), or cancels it after 10 s.
    func stop() async {
        await group.triggerGracefulShutdown()
        let task = self.task
        let watchdog = Task {
            try await Task.sleep(for: .seconds(10))
            task.cancel()
        }
        _ = await task.result
        watchdog.cancel()
    }
}

/// Runs `body` with a started server and always stops it afterwards.
func withServer<T: Sendable>(
    repository: any VaultRepository,
    adminKey: SigningPublicKey,
    _ body: (BenchServer) async throws -> T
) async throws -> T {
    try await using(try await BenchServer.start(repository: repository, adminKey: adminKey), release: { await $0.stop() }, body)
}

/// Runs `body` but gives up after `seconds` (the work is cancelled and left behind): for steps that
/// could otherwise wait forever, such as connecting to a PostgreSQL server that is not there.
func withDeadline<T: Sendable>(_ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let state = NIOLockedValueBox<CheckedContinuation<T, any Error>?>(nil)
    let resume: @Sendable (Result<T, any Error>) -> Bool = { result in
        // Whoever comes first takes the continuation; the other finds nil.
        let taken = state.withLockedValue { s -> CheckedContinuation<T, any Error>? in
            defer { s = nil }
            return s
        }
        guard let c = taken else { return false }
        c.resume(with: result)
        return true
    }
    let timer = NIOLockedValueBox<Task<Void, Never>?>(nil)
    return try await withCheckedThrowingContinuation { continuation in
        state.withLockedValue { $0 = continuation }
        let work = Task {
            let result: Result<T, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            _ = resume(result)
            timer.withLockedValue { $0?.cancel() }
        }
        let t = Task {
            do { try await Task.sleep(for: .seconds(seconds)) } catch { return }
            if resume(.failure(BenchError("\(what) did not finish within \(Int(seconds)) s"))) { work.cancel() }
        }
        timer.withLockedValue { $0 = t }
    }
}
