import Foundation
import GRDB
import Testing
import VaultTestSupport

/// `carevault-doctor watch` and `carevault-patient sync --watch` as processes (Docs/events.md, README
/// "Live updates"): a change appears within seconds, SIGTERM ends with 0, a server restart is survived,
/// an approval takes effect without the patient typing anything, and a doctor without a share hears
/// nothing of the patient.
@Suite("End to end: watching for changes", .serialized)
struct WatchCLITests {
    static func isChange(_ id: String) -> ([String: Any]) -> Bool {
        { $0["event"] as? String == "change" && $0["id"] as? String == id }
    }

    @Test(arguments: FaultBackend.allCases)
    func watchShowsAPushedChangeSurvivesARestartAndEndsWithZero(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            try await world.addDoctor("drbob", home: "bob")
            try await world.addDoctor("drcarol", home: "carol")
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            #expect(try await world.patient(["sync"]).status == 0)

            let bob = try Watcher(world, "carevault-doctor", ["watch", "alice", "--json"], home: "bob", password: FaultWorld.doctorPassword)
            defer { bob.process.stopIfRunning() }
            // drcarol has no share from alice: she watches every patient of hers, and hears nothing of alice.
            let carol = try Watcher(world, "carevault-doctor", ["watch", "--json"], home: "carol", password: FaultWorld.doctorPassword)
            defer { carol.process.stopIfRunning() }
            let subscribed = try await bob.waitFor("subscribed") { $0["event"] as? String == "subscribed" }
            #expect(subscribed["patient"] as? String == "alice")
            try await carol.waitFor("subscribed") { $0["event"] as? String == "subscribed" }
            // What was there before is the first refresh, not a change.
            #expect(bob.objects.count == 1)

            let outcome = try await world.patient(["outcome", "record", "--activity", "walk", "--occurrence", "1", "--value", "30", "--units", "min"])
            #expect(outcome.status == 0, "\(outcome.stderr)")
            let pushed = Date()
            let seen = try await bob.waitFor("the outcome", limit: 30) { $0["event"] as? String == "change" && $0["kind"] as? String == "outcome" }
            print("watch: the doctor printed the change \(Int(Date().timeIntervalSince(pushed) * 1000)) ms after the patient's push returned")
            #expect(seen["patient"] as? String == "alice")
            #expect(seen["category"] as? String == "interventions")
            #expect(seen["id"] as? String == "walk#1")
            #expect(seen["deleted"] as? Bool == false)

            // The server goes away and comes back on the same port: the watcher keeps going.
            await world.server.stop()
            try await world.server.start()
            let later = try await world.patient([
                "activity", "add", "--id", "stretch", "--title", "Stretch", "--category", "interventions", "--schedule", "daily@09:00",
            ])
            #expect(later.status == 0, "\(later.stderr)")
            let stretch = try await bob.waitFor("a change after the restart", limit: 90, Self.isChange("stretch"))
            #expect(stretch["kind"] as? String == "activity")
            #expect(stretch["title"] as? String == "Stretch")
            #expect(bob.process.isRunning)
            // The outage is said once on stderr, however many reconnections it took.
            #expect(bob.stderr.components(separatedBy: "retrying until it answers").count == 2, "\(bob.stderr)")

            #expect(try await bob.terminate() == 0, "\(bob.stderr)")
            #expect(try await carol.terminate() == 0, "\(carol.stderr)")
            #expect(!carol.stdout.contains("alice"), "a doctor without a share heard of the patient: \(carol.stdout)")
            #expect(carol.objects.allSatisfy { $0["event"] as? String != "change" })
        }
    }

    @Test func syncWatchDeliversAnApprovalAndPushesLocalChangesAcrossARestart() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            let alice = try Watcher(world, "carevault-patient", ["sync", "--watch", "--json"], home: "alice", password: FaultWorld.password)
            defer { alice.process.stopIfRunning() }
            try await alice.waitFor("subscribed") { $0["event"] as? String == "subscribed" }

            let grant = try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"])
            #expect(grant.status == 0, "\(grant.stderr)\nthe watching device:\n\(alice.stderr)")
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            // Nobody types anything on the patient's side: the approval reaches the watching device,
            // which seals the keys to the doctor; the doctor can then read the category.
            try await Self.waitUntilDoctorReads("walk", world: world, limit: 60)
            #expect(alice.objects.contains { $0["event"] as? String == "share" && $0["state"] as? String == "active" })

            // The server restarts; then a change saved without syncing is sent by the watching device.
            await world.server.stop()
            try await world.server.start()
            let offline = try await world.patient([
                "activity", "add", "--offline", "--id", "stretch", "--title", "Stretch", "--category", "interventions", "--schedule", "daily@09:00",
            ])
            #expect(offline.status == 0, "\(offline.stderr)")
            try await Self.waitUntilDoctorReads("stretch", world: world, limit: 90)
            #expect(alice.process.isRunning)

            #expect(try await alice.terminate() == 0, "\(alice.stderr)")
        }
    }

    @Test func aSessionLoggedOutEndsTheWatchWith77() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            let bob = try Watcher(world, "carevault-doctor", ["watch", "--json"], home: "bob", password: FaultWorld.doctorPassword)
            defer { bob.process.stopIfRunning() }
            try await bob.waitFor("subscribed") { $0["event"] as? String == "subscribed" }
            // The session the watcher uses ends (logged out on this device): the stream ends, and so does the watch.
            #expect(try await world.doctor(["logout"]).status == 0)
            #expect(try await bob.exitStatus() == 77, "\(bob.stderr)")
        }
    }

    @Test func anIntegrityFailureIsReportedTheRestFollowedAndTheEndIs65() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            #expect(try await world.patient(["sync"]).status == 0)
            // The operator breaks the stored envelope of every record before the doctor first reads them.
            let queue = try DatabaseQueue(path: try #require(world.server.database.sqlitePath))
            let heads = try await queue.read { db in
                try Row.fetchAll(db, sql: "SELECT v.version_id, v.envelope FROM versions v JOIN heads h ON h.version_id = v.version_id").map {
                    ($0[0] as String, $0[1] as Data)
                }
            }
            try queue.close()
            let op = ServerOperator.of(world.server.database)
            try await op.dropGuard(of: .versions)
            for (versionID, data) in heads {
                let broken = try StoredEnvelopeText.edit(data) { $0.replacingOccurrences(of: #""ciphertext":""#, with: #""ciphertext":"*"#) }
                try await op.replaceStoredEnvelope(of: versionID, with: [UInt8](broken))
            }

            let bob = try Watcher(world, "carevault-doctor", ["watch", "alice", "--json"], home: "bob", password: FaultWorld.doctorPassword)
            defer { bob.process.stopIfRunning() }
            try await bob.waitFor("subscribed") { $0["event"] as? String == "subscribed" }
            #expect(bob.stderr.contains("integrity check failed"), "\(bob.stderr)")
            let later = try await world.patient([
                "activity", "add", "--id", "stretch", "--title", "Stretch", "--category", "interventions", "--schedule", "daily@09:00",
            ])
            #expect(later.status == 0, "\(later.stderr)")
            try await bob.waitFor("the change after the failure", limit: 30, Self.isChange("stretch"))
            #expect(!bob.objects.contains { $0["id"] as? String == "walk" }, "a record that failed its check was printed")
            #expect(try await bob.terminate() == 65, "\(bob.stderr)")
        }
    }

    @Test func aChangeTheCommitmentContradictsIsPrintedOnlyMarkedUnconfirmed() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            // A category the doctor is not shared yet: an activity, then a newer version of it.
            let stretch = try await world.patient([
                "activity", "add", "--id", "stretch", "--title", "Stretch", "--category", "exercise", "--schedule", "daily@09:00",
            ])
            #expect(stretch.status == 0, "\(stretch.stderr)")
            #expect(try await world.patient(["sync"]).status == 0)
            let queue = try DatabaseQueue(path: try #require(world.server.database.sqlitePath))
            let heads = { @Sendable () async throws -> [String: String] in
                try await queue.read { db in
                    Dictionary(
                        uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT record_id, version_id FROM heads").map {
                            ($0[0] as String, $0[1] as String)
                        }
                    )
                }
            }
            let before = try await heads()
            let update = try await world.patient(["activity", "update", "--id", "stretch", "--title", "Stretch longer"])
            #expect(update.status == 0, "\(update.stderr)")
            #expect(try await world.patient(["sync"]).status == 0)
            let superseded = try #require(try await heads().first { before[$0.key] != nil && before[$0.key] != $0.value })

            let bob = try Watcher(world, "carevault-doctor", ["watch", "alice", "--json"], home: "bob", password: FaultWorld.doctorPassword)
            defer { bob.process.stopIfRunning() }
            try await bob.waitFor("subscribed") { $0["event"] as? String == "subscribed" }
            // The operator serves the first version as the head; the patient's commitment names the second.
            let first: String = try #require(before[superseded.key])
            try queue.close()
            try await ServerOperator.of(world.server.database).pointRecordHead(superseded.key, at: first)
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "exercise"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            _ = try await world.patient(["sync"])
            let seen = try await bob.waitFor("the contradicted change", limit: 60) {
                $0["event"] as? String == "change" && $0["category"] as? String == "exercise"
            }
            #expect(seen["unconfirmed"] as? Bool == true, "\(seen)")
            let exercise = bob.objects.filter { $0["event"] as? String == "change" && $0["category"] as? String == "exercise" }
            #expect(exercise.allSatisfy { $0["unconfirmed"] as? Bool == true }, "an unmarked change the commitment contradicts: \(exercise)")
            #expect(bob.stderr.contains("integrity check failed"), "\(bob.stderr)")
            #expect(try await bob.terminate() == 65, "\(bob.stderr)")
        }
    }

    @Test func aRefusedPullDropsThatPatientAndTheWatchGoesOn() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            #expect(try await world.patient(["sync"]).status == 0)
            let bob = try Watcher(world, "carevault-doctor", ["watch", "--json"], home: "bob", password: FaultWorld.doctorPassword)
            defer { bob.process.stopIfRunning() }
            try await bob.waitFor("subscribed") { $0["event"] as? String == "subscribed" }
            // The share ends on the server with no share event (as when a revoke races a push): the next pull is refused.
            try await ServerOperator.of(world.server.database).editShares(.all, state: .revoked)
            let later = try await world.patient([
                "activity", "add", "--id", "stretch", "--title", "Stretch", "--category", "interventions", "--schedule", "daily@09:00",
            ])
            #expect(later.status == 0, "\(later.stderr)")
            // The server may already have stopped telling the doctor of this patient (its heartbeat re-reads the
            // shares), and then no change event comes. A restart makes the tool reconnect and resync, which pulls
            // every patient: either way the next pull is refused and the patient dropped.
            await world.server.stop()
            try await world.server.start()
            let gone = try await bob.waitFor("the patient dropped", limit: 90) { $0["event"] as? String == "unwatched" }
            #expect(gone["patient"] as? String == "alice")
            #expect(bob.process.isRunning, "\(bob.stderr)")
            #expect(!bob.objects.contains { $0["id"] as? String == "stretch" })
            #expect(try await bob.terminate() == 0, "\(bob.stderr)")
        }
    }

    /// Polls `show` as a doctor would until the activity `id` is shown (each try is a full verified read).
    static func waitUntilDoctorReads(_ id: String, world: FaultWorld, limit: TimeInterval) async throws {
        let deadline = Date().addingTimeInterval(limit)
        var last = ""
        while Date() < deadline {
            let show = try await world.doctor(["show", "alice", "--json"])
            last = show.stdout + show.stderr
            if show.status == 0, let json = try? JSONSerialization.jsonObject(with: Data(show.stdout.utf8)) as? [String: Any],
                let activities = json["activities"] as? [[String: Any]], activities.contains(where: { $0["id"] as? String == id })
            {
                return
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        Issue.record("the doctor could not read \(id) within \(Int(limit)) s: \(last)")
    }
}
