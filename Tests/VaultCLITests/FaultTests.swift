import Foundation
import GRDB
import Testing
import VaultCore

@testable import VaultClient

/// Processes killed with SIGKILL in the middle of a sync lose nothing and duplicate nothing
/// (Docs/design.md §5): the server killed mid-push and restarted on the same database, and the patient
/// tool killed at random points of a sync. Random choices come from a printed seed (`CAREVAULT_SEED`).
@Suite("Faults: killed processes lose and duplicate nothing", .serialized)
struct FaultTests {
    /// Outcomes recorded offline before the interrupted push (`CAREVAULT_FAULT_OUTCOMES`, default 5,000).
    static var outcomeCount: Int { ProcessInfo.processInfo.environment["CAREVAULT_FAULT_OUTCOMES"].flatMap { Int($0) } ?? 5_000 }

    @Test(arguments: FaultBackend.allCases)
    func serverKilledMidPushThenRestartedKeepsEveryRecordOnce(backend: FaultBackend) async throws {
        var rng = SeededGenerator(seed: SeededGenerator.seed(for: "serverKilledMidPush[\(backend)]"))
        try await FaultWorld.run(backend) { world in
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00", "--offline",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            var n = 0
            let vault = try await world.vault()
            var interrupted = 0
            var missed = 0
            for round in 1...6 where interrupted < 2 {
                let before = try await world.server.database.counts().versions
                // Each kill needs a push long enough to land in: when the last one finished first, import
                // more, twice as many for each round the kill came too late.
                if n + 1 - before < 2_500 {
                    let count = Self.outcomeCount << min(missed, 3)
                    try await FaultWorld.importOutcomes(vault, activity: "walk", category: "interventions", first: n, count: count)
                    n += count
                }
                let remaining = n + 1 - before
                // Kill once the server has stored part of the push, after a random short delay.
                // Early in the push: binary pushes are fast, and counting the versions takes a while on a loaded machine.
                let threshold = before + Int.random(in: 1...max(1, remaining / 4), using: &rng)
                let delay = Int.random(in: 0...30, using: &rng)
                let sync = try world.startPatient(["sync"])
                let seen = try await world.server.kill(whenVersionsReach: threshold, after: delay)
                await world.server.kill()
                let status = try await sync.wait()
                let atKill = try await world.server.database.counts()
                print("[\(backend)] round \(round): server killed \(delay) ms after \(seen) versions; stored: \(atKill); sync exit \(status)")
                if atKill.versions < n + 1 {
                    interrupted += 1
                    missed = 0
                    #expect(status != 0, "a sync cut off by the server's death must not report success")
                } else {
                    missed += 1
                }
                #expect(atKill.versions == atKill.heads, "every stored version of a record written once is its head")
                try await world.server.start()
            }
            #expect(interrupted >= 1, "the server was never killed in the middle of the push")
            let expected = n + 1

            let done = try await world.patient(["sync"])
            #expect(done.status == 0, "\(done.stderr)")
            let counts = try await world.server.database.counts()
            #expect(counts == .init(versions: expected, heads: expected, recordsWithVersions: expected), "each record is on the server once")
            #expect(try await world.vault().pendingCount() == 0)
            // Through the API: a new device pulls every record exactly once, with its value.
            let other = try await world.newDevice("alice-2")
            let pulled = try await other.sync()
            #expect(pulled.pulled == expected)
            let outcomes = try await other.outcomes()
            #expect(outcomes.count == n && Set(outcomes.map(\.occurrence)) == Set(0..<n))
            #expect(outcomes.allSatisfy { $0.liveValues.map(\.value) == [.number(Double($0.occurrence))] })
        }
    }

    @Test(arguments: FaultBackend.allCases)
    func patientToolKilledAtRandomPointsOfASyncLosesNothing(backend: FaultBackend) async throws {
        var rng = SeededGenerator(seed: SeededGenerator.seed(for: "patientKilledMidSync[\(backend)]"))
        try await FaultWorld.run(backend) { world in
            for (id, category) in [("walk", "interventions"), ("mood", "assessments")] {
                let add = try await world.patient([
                    "activity", "add", "--id", id, "--title", id, "--category", category, "--schedule", "daily@08:00", "--offline",
                ])
                #expect(add.status == 0, "\(add.stderr)")
            }
            #expect(try await world.patient(["sync"]).status == 0)
            // Another device of alice, in this process: its changes give each sync something to pull.
            let other = try await world.newDevice("phone")
            _ = try await other.sync()

            var next = 0
            var kills = 0
            var rounds = 0
            var maxDelay = 1_200
            while kills < 5 && rounds < 16 {
                rounds += 1
                let category = rounds.isMultiple(of: 2) ? ("walk", "interventions") : ("mood", "assessments")
                try await FaultWorld.importOutcomes(try await world.vault(), activity: category.0, category: category.1, first: next, count: 1_000)
                try await FaultWorld.importOutcomes(other, activity: category.0, category: category.1, first: next + 1_000, count: 500)
                next += 1_500
                _ = try await other.sync()
                let delay = Int.random(in: 50...maxDelay, using: &rng)
                let sync = try world.startPatient(["sync"])
                try await Task.sleep(for: .milliseconds(delay))
                let killed = await sync.kill()
                print("[\(backend)] round \(rounds): patient tool \(killed ? "killed" : "had finished") after \(delay) ms")
                // A sync that ends before the kill shortens the next delays, so the kills land mid-sync.
                if killed { kills += 1 } else { maxDelay = max(100, maxDelay * 2 / 3) }
            }
            #expect(kills >= 5, "only \(kills) of \(rounds) syncs were cut off")

            let done = try await world.patient(["sync"])
            #expect(done.status == 0, "\(done.stderr)")
            _ = try await other.sync()
            let store = try await world.vault().account.store.storeURL
            let check = try await DatabaseQueue(path: store.path).read { try String.fetchOne($0, sql: "PRAGMA integrity_check") }
            #expect(check == "ok", "the local store survived every kill")
            #expect(try await world.patient(["activity", "list"]).status == 0, "the tool opens its store")

            let vault = try await world.vault()
            #expect(try await vault.pendingCount() == 0)
            let mine = try await vault.outcomes()
            #expect(mine.count == next && Set(mine.map(\.occurrence)).count == next, "every outcome of both devices, each once")
            #expect(mine.allSatisfy { $0.liveValues.map(\.value) == [.number(Double($0.occurrence))] })
            #expect(try await other.outcomes() == mine, "both devices hold the same records")
            let counts = try await world.server.database.counts()
            #expect(counts == .init(versions: next + 2, heads: next + 2, recordsWithVersions: next + 2), "each record is on the server once")
        }
    }
}
