import Foundation
import Logging
import Testing
import VaultAPI
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// The periodic clean-up deletes the rows that stopped mattering and keeps the live ones, in bounded
/// batches, on both backends, also with two instances at once (Docs/operations.md "Retention").
@Suite("Retention (both backends)")
struct RetentionTests {
    static let now: UnixMillis = 10_000_000

    /// Five expired and two live sessions, five expired and two live back-off rows, five old and two
    /// recent admin signatures.
    static func seed(_ repo: any VaultRepository) async throws -> (expired: [String], live: [String]) {
        let user = try Fixtures.userRow("pat")
        try await repo.insertUser(user, audit: Fixtures.audit)
        var expired: [String] = []
        var live: [String] = []
        for i in 0..<7 {
            let name = "\(i)"
            let ends = i < 5 ? now - 1 - Int64(i) : now + 1_000
            try await repo.insertSession(SessionRow(tokenHash: "session-\(name)", userID: user.id, createdAt: 0, expiresAt: ends))
            _ = try await repo.updateLoginThrottle(keys: ["throttle-\(name)"], now: 0) { _ in
                ([LoginThrottleRow(key: "throttle-\(name)", failures: 3, lastFailure: 0, expiresAt: ends)], ())
            }
            let seen = i < 5 ? 100 + Int64(i) : now - 1_000
            #expect(try await repo.rememberAdminSignature("signature-\(name)", at: seen, purgeBefore: 0))
            if i < 5 { expired.append(name) } else { live.append(name) }
        }
        return (expired, live)
    }

    /// Which of `names` still have a row in each table.
    static func remaining(
        _ repo: any VaultRepository,
        _ names: [String]
    ) async throws -> (sessions: [String], throttle: [String], signatures: [String]) {
        var sessions: [String] = []
        var signatures: [String] = []
        for n in names {
            if try await repo.session(tokenHash: "session-\(n)") != nil { sessions.append(n) }
        }
        let throttle = try await repo.loginThrottle(keys: names.map { "throttle-\($0)" }, now: 0).map { String($0.key.dropFirst("throttle-".count)) }
        for n in names where try await !repo.rememberAdminSignature("signature-\(n)", at: now, purgeBefore: 0) { signatures.append(n) }
        return (sessions, throttle.sorted(), signatures)
    }

    static func service(_ repo: any VaultRepository, batch: Int, maxBatches: Int) -> RetentionService {
        RetentionService(
            repository: repo,
            schedule: .init(interval: .seconds(1), batch: batch, maxBatches: maxBatches),
            clock: { now },
            logger: Logger(label: "retention-test")
        )
    }

    @Test(arguments: Backend.allCases)
    func expiredRowsGoInBoundedBatchesAndLiveOnesStay(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let (expired, live) = try await Self.seed(repo)
            // One batch of two: no more than two rows of any table go in one run.
            let first = try await Self.service(repo, batch: 2, maxBatches: 1).runOnce()
            #expect(first == PurgedRows(sessions: 2, loginThrottle: 2, adminSignatures: 2))
            // The next run goes on until a batch comes back short.
            let rest = try await Self.service(repo, batch: 2, maxBatches: 100).runOnce()
            #expect(rest == PurgedRows(sessions: 3, loginThrottle: 3, adminSignatures: 3))
            #expect(try await Self.service(repo, batch: 2, maxBatches: 100).runOnce().total == 0, "nothing left to delete")
            let left = try await Self.remaining(repo, expired + live)
            #expect(left.sessions == live && left.throttle == live && left.signatures == live)
        }
    }

    @Test(arguments: Backend.allCases)
    func twoInstancesAtOnceDeleteEachRowOnce(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let (expired, live) = try await Self.seed(repo)
            async let a = Self.service(repo, batch: 1, maxBatches: 100).runOnce()
            async let b = Self.service(repo, batch: 1, maxBatches: 100).runOnce()
            let (x, y) = try await (a, b)
            #expect(x.sessions + y.sessions == 5 && x.loginThrottle + y.loginThrottle == 5 && x.adminSignatures + y.adminSignatures == 5)
            let left = try await Self.remaining(repo, expired + live)
            #expect(left.sessions == live && left.throttle == live && left.signatures == live)
        }
    }

    @Test func theServiceRunsOnItsScheduleUntilCancelled() async throws {
        try await TestDatabase.with(.sqlite) { repo in
            let (expired, live) = try await Self.seed(repo)
            // Two rows of each table per run: three runs clear the five expired ones.
            let service = RetentionService(
                repository: repo,
                schedule: .init(firstRunAfter: .milliseconds(10), interval: .milliseconds(20), batch: 2, maxBatches: 1),
                clock: { Self.now },
                logger: Logger(label: "retention-test")
            )
            let running = Task { try await service.run() }
            for _ in 0..<500 {
                var left = 0
                for n in expired where try await repo.session(tokenHash: "session-\(n)") != nil { left += 1 }
                if left == 0 { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            running.cancel()
            try await running.value
            let left = try await Self.remaining(repo, expired + live)
            #expect(left.sessions == live && left.throttle == live && left.signatures == live)
        }
    }

    /// A login sweeps other accounts' expired sessions and back-off rows on its way, but a bounded batch
    /// of them (64): a backlog is the retention purge's, never one login's to pay for.
    @Test(arguments: Backend.allCases)
    func aLoginSweepsOnlyABoundedBatchOfOtherAccountsExpiredRows(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let other = try await api.user("other", role: .patient)
            _ = try await api.user("mine", role: .patient)
            let repo = api.repository
            let past = api.harness.clock.millis - 1
            let names = (0..<100).map { "stale-\($0)" }
            for name in names {
                try await repo.insertSession(SessionRow(tokenHash: name, userID: other.id, createdAt: 0, expiresAt: past))
                _ = try await repo.updateLoginThrottle(keys: [name], now: 0) { _ in
                    ([LoginThrottleRow(key: name, failures: 1, lastFailure: 0, expiresAt: past)], ())
                }
            }
            func left() async throws -> (sessions: Int, throttle: Int) {
                var sessions = 0
                for name in names where try await repo.session(tokenHash: name) != nil { sessions += 1 }
                return (sessions, try await repo.loginThrottle(keys: names, now: 0).count)
            }
            #expect(try await api.login("mine", password: "correct horse").status == .ok)
            let afterLogin = try await left()
            #expect(afterLogin.sessions == 100 - 64, "one batch of the other account's expired sessions")
            #expect(afterLogin.throttle >= 100 - 2 * 64 && afterLogin.throttle < 100, "a batch of back-off rows per throttle check")
            let purge = RetentionService(
                repository: repo,
                schedule: .init(interval: .seconds(1), batch: 50, maxBatches: 100),
                clock: { api.harness.clock.millis },
                logger: Logger(label: "retention-test")
            )
            _ = try await purge.runOnce()
            let afterPurge = try await left()
            #expect(afterPurge.sessions == 0 && afterPurge.throttle == 0, "the purge takes the rest")
        }
    }
}
