import Foundation
import NIOConcurrencyHelpers
import NIOCore
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto

/// What load clients did: the latency of each answered request in milliseconds, how many of those
/// were pushes and pulls, and the failures with the first one's message.
struct LoadWork: Sendable {
    var latencies: [Double] = []
    var pushes = 0
    var pulls = 0
    var errors = 0
    var firstError: String?

    /// This work and `other` together.
    func merged(with other: LoadWork) -> LoadWork {
        LoadWork(
            latencies: latencies + other.latencies,
            pushes: pushes + other.pushes,
            pulls: pulls + other.pulls,
            errors: errors + other.errors,
            firstError: firstError ?? other.firstError
        )
    }
}

/// One load level: N concurrent clients, each on its own keep-alive connection to 127.0.0.1,
/// alternating pushes and pulls until the level's time or request budget runs out.
struct LoadLevelResult: Sendable {
    /// Concurrent clients, each on its own connection.
    var clients: Int
    /// Wall time of the level, from the first request to the last answer.
    var seconds: Double
    /// Every client's work; the latencies sorted.
    var work: LoadWork
    /// Peak RSS of the carevault-server process during the level.
    var rssMiB: Double?
    /// Whether the kernel reset the peak before the level (else the peak is the highest 50 ms sample).
    var peakWasReset: Bool

    /// Answered requests.
    var requests: Int { work.latencies.count }
    /// Answered requests per second over the level.
    var rps: Double { Double(requests) / seconds }
    /// Median latency in milliseconds.
    var p50Ms: Double { Measure.percentile(sorted: work.latencies, 50) }
    /// 99th-percentile latency in milliseconds.
    var p99Ms: Double { Measure.percentile(sorted: work.latencies, 99) }
}

/// The server under load (Docs/benchmarks.md §5): the release `carevault-server` executable in its own process on
/// SQLite, so its memory is its own. The load generator shares the machine's cores with it, so it
/// sends pre-sealed, pre-encoded request bodies and only checks the answers, to keep its own share
/// small; see RawHTTPClient for why it does not go through the SDK's Transport.
struct LoadBench {
    let plan: BenchPlan
    let root: URL

    /// Envelopes per push and changes per pull.
    static let pushSize = 10
    static let pullSize = 100
    static let accountCount = 8

    struct Account: Sendable {
        let identity: Identity
        let token: String
        let tresor: Tresor
        let deviceID: String
        /// The highest change sequence seen for this owner (pulls read the 100 changes before it).
        let lastSequence: NIOLockedValueBox<UInt64>
        /// The next occurrence index to use in a record id (every pushed record is new).
        let nextIndex: NIOLockedValueBox<Int>

        func bodies(batches: Int, size: Int, noteLength: Int) async throws -> [ByteBuffer] {
            let first = nextIndex.withLockedValue { i -> Int in
                defer { i += batches * size }
                return i
            }
            return try await EnvelopeFactory.pushBodies(
                identity: identity,
                tresor: tresor,
                deviceID: deviceID,
                first: first,
                batches: batches,
                size: size,
                noteLength: noteLength
            )
        }
    }

    func run() async throws -> [LoadLevelResult] {
        let admin = SigningKeyPair.generate()
        let noteLength = try BenchRecords.noteLength(for: .small)
        let id = shortID()
        return try await withServerProcess(adminKey: admin.publicKey, folder: root.appendingPathComponent("load-server-\(id)")) { server in
            let world = BenchWorld(baseURL: server.baseURL, admin: admin, root: root.appendingPathComponent("load-\(id)"))
            defer { try? FileManager.default.removeItem(at: world.root) }
            let accounts = try await makeAccounts(world, admin: admin)
            return try await withRawHTTP(server.baseURL, connections: plan.loadClients.max() ?? 1) { http in
                // Every owner starts with 1,000 stored records, so each pull has 100 changes to read.
                for account in accounts {
                    for body in try await account.bodies(batches: 2, size: 500, noteLength: noteLength) {
                        _ = try await push(http, account, body)
                    }
                }
                var results: [LoadLevelResult] = []
                for n in plan.loadClients {
                    results.append(try await level(http, server: server, accounts: accounts, clients: n, noteLength: noteLength))
                }
                return results
            }
        }
    }

    /// Eight approved patients, logged in, each with a declared tresor.
    func makeAccounts(_ world: BenchWorld, admin: SigningKeyPair) async throws -> [Account] {
        let names = (0..<Self.accountCount).map { "load-\($0)-\(shortID())" }
        let devices = try names.map { try world.device($0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (name, (accounts, _)) in zip(names, devices) {
                group.addTask { _ = try await accounts.register(username: name, password: BenchWorld.password, role: .patient) }
            }
            try await group.waitForAll()
        }
        try await world.approveAll()
        var out: [Account] = []
        for (k, (name, (accounts, _))) in zip(names, devices).enumerated() {
            let account = try await accounts.login(username: name, password: BenchWorld.password)
            guard let token = account.session?.token else { throw BenchError("no session after login") }
            let tresor = Tresor.create(ownerID: account.identity.userID, category: BenchRecords.category)
            try await EnvelopeFactory.declare(
                tresor,
                identity: account.identity,
                certificate: account.certificate,
                adminKey: admin.publicKey,
                token: token,
                baseURL: world.baseURL
            )
            out.append(
                Account(
                    identity: account.identity,
                    token: token,
                    tresor: tresor,
                    deviceID: String(format: "dev-load%012d", k),
                    lastSequence: NIOLockedValueBox(0),
                    nextIndex: NIOLockedValueBox(0)
                )
            )
        }
        return out
    }

    static let decoder = JSONDecoder()

    /// Takes one request from the level's budget; false once it is spent.
    static func take(_ budget: NIOLockedValueBox<Int>) -> Bool {
        budget.withLockedValue { left in
            guard left > 0 else { return false }
            left -= 1
            return true
        }
    }

    /// Sends one push; checks every envelope was stored and updates the owner's last sequence.
    func push(_ http: RawHTTPClient, _ account: Account, _ body: ByteBuffer) async throws {
        let (status, bytes) = try await http.send(.POST, Routes.records, token: account.token, body: body)
        guard status == 200 else { throw BenchError("push answered HTTP \(status)") }
        let answer = try Self.decoder.decode(PushResponse.self, from: Data(bytes.readableBytesView))
        guard answer.results.allSatisfy({ $0.status == .stored }) else {
            throw BenchError("push not stored: \(answer.results.first { $0.status != .stored }?.reason ?? "?")")
        }
        if let top = answer.results.compactMap(\.sequence).max() {
            account.lastSequence.withLockedValue { $0 = max($0, top) }
        }
    }

    /// Sends one pull of the 100 changes before the owner's newest.
    func pull(_ http: RawHTTPClient, _ account: Account) async throws {
        let last = account.lastSequence.withLockedValue { $0 }
        let since = last > UInt64(Self.pullSize) ? last - UInt64(Self.pullSize) : 0
        let (status, _) = try await http.send(.GET, Routes.records + "?since=\(since)&limit=\(Self.pullSize)", token: account.token)
        guard status == 200 else { throw BenchError("pull answered HTTP \(status)") }
    }

    func level(_ http: RawHTTPClient, server: ServerProcess, accounts all: [Account], clients: Int, noteLength: Int) async throws -> LoadLevelResult {
        let accounts = Array(all.prefix(min(clients, all.count)))
        // Bounded in count: at most `budget` requests, half of them pushes (pre-sealed now, not timed).
        let budget = plan.loadRequestBudget
        let pushBatches = budget / 2
        var pools: [[ByteBuffer]] = []
        let (_, sealSeconds) = try await Measure.timeAsync {
            for (k, account) in accounts.enumerated() {
                let share = pushBatches / accounts.count + (k < pushBatches % accounts.count ? 1 : 0)
                pools.append(try await account.bodies(batches: share, size: Self.pushSize, noteLength: noteLength))
            }
        }
        let poolState = NIOLockedValueBox<[[ByteBuffer]]>(pools.map { Array($0.reversed()) })
        pools = []
        let remaining = NIOLockedValueBox(budget)
        Progress.say(
            "load \(clients) clients: \(pushBatches) push bodies of \(Self.pushSize) envelopes sealed in \(fmt(sealSeconds, 1)) s (not timed); running"
        )

        // Open the N connections before the clock starts.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                group.addTask { _ = try await http.send(.GET, Routes.health, token: nil) }
            }
            try await group.waitForAll()
        }

        let peakReset = server.resetPeak()
        let sampled = NIOLockedValueBox<Double>(server.currentMiB() ?? 0)
        let sampler = Task {
            while !Task.isCancelled {
                if let m = server.currentMiB() { sampled.withLockedValue { $0 = max($0, m) } }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        let clock = Measure.clock
        let start = clock.now
        let deadline = start + .seconds(plan.loadSeconds)
        let stats = try await withThrowingTaskGroup(of: LoadWork.self) { group in
            for c in 0..<clients {
                let account = accounts[c % accounts.count]
                let slot = c % accounts.count
                group.addTask {
                    var s = LoadWork()
                    var i = c  // half the clients start with a pull, half with a push
                    while clock.now < deadline, Self.take(remaining) {
                        let body: ByteBuffer? = i % 2 == 0 ? poolState.withLockedValue { $0[slot].popLast() } : nil
                        let t0 = clock.now
                        do {
                            if let body {
                                try await push(http, account, body)
                                s.pushes += 1
                            } else {
                                try await pull(http, account)
                                s.pulls += 1
                            }
                            s.latencies.append(Measure.seconds(clock.now - t0) * 1_000)
                        } catch {
                            s.errors += 1
                            if s.firstError == nil { s.firstError = "\(error)" }
                        }
                        i += 1
                    }
                    return s
                }
            }
            var all = LoadWork()
            for try await s in group { all = all.merged(with: s) }
            return all
        }
        let elapsed = Measure.since(start)
        sampler.cancel()
        _ = await sampler.result
        // VmHWM since the reset; where the kernel refused the reset, the highest of the 50 ms samples.
        let peak = peakReset ? server.peakMiB() : sampled.withLockedValue { $0 }
        var work = stats
        work.latencies.sort()
        if work.errors > 0, let first = work.firstError {
            Progress.say("load \(clients) clients: \(work.errors) failed requests, first: \(first)")
        }
        let r = LoadLevelResult(clients: clients, seconds: elapsed, work: work, rssMiB: peak, peakWasReset: peakReset)
        Progress.say(
            "load \(clients) clients: \(r.requests) requests (\(work.pushes) pushes, \(work.pulls) pulls) in \(fmt(elapsed, 2)) s: "
                + "\(fmt(r.rps, 0)) req/s, p50 \(fmt(r.p50Ms, 2)) ms, p99 \(fmt(r.p99Ms, 2)) ms, peak RSS \(fmt(peak ?? .nan, 0)) MiB"
        )
        return r
    }
}
