import Foundation
import GRDB
import Testing
import VaultTestSupport

/// Data the patient's commitment did not confirm never leaves the doctor's tool unmarked or unasked for
/// (Docs/design.md §5.3): a server that withholds every commitment from a fresh doctor device and serves a
/// removed activity's last live version instead of its tombstone.
@Suite("End to end: unconfirmed data leaves the doctor's tool only when asked for, and marked", .serialized)
struct UnconfirmedExportCLITests {
    @Test(arguments: FaultBackend.allCases)
    func adherenceAndExportsOfAWithheldCommitmentNeedTheFlagAndCarryTheMark(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            try await world.addDoctor("drbob", home: "bob")
            for id in ["walk", "resurrected"] {
                let add = try await world.patient([
                    "activity", "add", "--id", id, "--title", id, "--category", "interventions", "--schedule", "daily@08:00",
                ])
                #expect(add.status == 0, "\(add.stderr)")
            }
            let record = try await world.patient(["outcome", "record", "--activity", "walk", "--occurrence", "1", "--value", "30", "--units", "min"])
            #expect(record.status == 0, "\(record.stderr)")
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            #expect(try await world.patient(["sync"]).status == 0)
            let live = try await world.server.database.strings("SELECT record_id, version_id FROM heads")
            #expect(try await world.patient(["activity", "remove", "--id", "resurrected"]).status == 0)

            // Confirmed: every row and resource says verified.
            let csv = world.tools.root.appendingPathComponent("verified.csv")
            let honest = try await world.doctor(["export", "alice", "--format", "csv", "--output", csv.path])
            #expect(honest.status == 0, "\(honest.stderr)")
            let honestRows = try Self.rows(csv)
            #expect(!honestRows.isEmpty && honestRows.allSatisfy { $0.hasSuffix(",verified") }, "\(honestRows)")
            let honestFHIR = try await world.doctor(["export", "alice", "--format", "fhir"])
            #expect(honestFHIR.status == 0, "\(honestFHIR.stderr)")
            #expect(try Self.fhirTags(honestFHIR.stdout) == ["verified"])

            // The operator serves the removed activity's live version again and withholds every commitment.
            let tombstones = Set(try await world.server.database.strings("SELECT record_id FROM heads WHERE deleted").map { $0[0] })
            let resurrect = try #require(live.first { tombstones.contains($0[0]) })
            let op = ServerOperator.of(world.server.database)
            try await op.pointRecordHead(resurrect[0], at: resurrect[1], deleted: false)
            try await op.dropCommitments()
            #expect(try await world.doctor(["login", "--username", "drbob", "--remember"], home: "bob-new").status == 0)

            let adherence = try await world.doctor(["adherence", "alice"], home: "bob-new")
            #expect(adherence.status == 65, "\(adherence.stderr)")
            #expect(adherence.stdout.isEmpty, "nothing computed: \(adherence.stdout)")
            #expect(adherence.stderr.contains("not confirmed") && adherence.stderr.contains("--allow-unconfirmed"), "\(adherence.stderr)")
            let refused = world.tools.root.appendingPathComponent("refused.csv")
            let export = try await world.doctor(["export", "alice", "--format", "csv", "--output", refused.path], home: "bob-new")
            #expect(export.status == 65, "\(export.stderr)")
            #expect(!FileManager.default.fileExists(atPath: refused.path), "nothing written")
            let fhirRefused = try await world.doctor(["export", "alice", "--format", "fhir"], home: "bob-new")
            #expect(fhirRefused.status == 65 && fhirRefused.stdout.isEmpty)

            let allowedCSV = world.tools.root.appendingPathComponent("unconfirmed.csv")
            let allowed = try await world.doctor(
                ["export", "alice", "--format", "csv", "--output", allowedCSV.path, "--allow-unconfirmed"],
                home: "bob-new"
            )
            #expect(allowed.status == 0, "\(allowed.stderr)")
            #expect(allowed.stderr.contains("warning") && allowed.stderr.contains("not confirmed"), "\(allowed.stderr)")
            let rows = try Self.rows(allowedCSV)
            #expect(!rows.isEmpty && rows.allSatisfy { $0.hasSuffix(",unconfirmed") }, "\(rows)")
            let fhir = try await world.doctor(["export", "alice", "--format", "fhir", "--allow-unconfirmed"], home: "bob-new")
            #expect(fhir.status == 0, "\(fhir.stderr)")
            #expect(fhir.stdout.contains("resurrected"), "the removed activity is what the server showed: marked, not hidden")
            #expect(try Self.fhirTags(fhir.stdout) == ["unconfirmed"])
            #expect(fhir.stdout.contains("UNCERTREL"))
            let json = try await world.doctor(["adherence", "alice", "--json", "--allow-unconfirmed"], home: "bob-new")
            #expect(json.status == 0, "\(json.stderr)")
            let adherenceRows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
            #expect(!adherenceRows.isEmpty && adherenceRows.allSatisfy { $0["integrity"] as? String == "unconfirmed" })
            let text = try await world.doctor(["adherence", "alice", "--allow-unconfirmed"], home: "bob-new")
            #expect(text.status == 0 && text.stdout.contains("UNCONFIRMED"), "\(text.stdout)")
            let show = try await world.doctor(["show", "alice", "--json"], home: "bob-new")
            #expect(show.status == 0, "a screen says it, marked: \(show.stderr)")
            let shown = try JSONSerialization.jsonObject(with: Data(show.stdout.utf8)) as? [String: Any]
            #expect(shown?["integrity"] as? [String: String] == ["interventions": "unconfirmed"])
        }
    }

    /// `watch --json` marks a change unconfirmed while no commitment of the patient's was ever shown to this
    /// doctor (a server withholding every one), as `show` says "not confirmed" (Docs/events.md §9).
    @Test(arguments: FaultBackend.allCases)
    func watchMarksChangesUnconfirmedWhileNoCommitmentWasEverShown(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            try await world.walkSharedWithDoctor()
            try await ServerOperator.of(world.server.database).withholdCommitments()

            let bob = try Watcher(world, "carevault-doctor", ["watch", "alice", "--json"], home: "bob", password: FaultWorld.doctorPassword)
            defer { bob.process.stopIfRunning() }
            try await bob.waitFor("subscribed") { $0["event"] as? String == "subscribed" }
            // The push is stored; the patient's own device sees the server show no commitment after one it
            // accepted, and says so (its status is not what this test is about).
            _ = try await world.patient(["outcome", "record", "--activity", "walk", "--occurrence", "1", "--value", "30", "--units", "min"])
            let seen = try await bob.waitFor("the outcome", limit: 60) { $0["event"] as? String == "change" && $0["kind"] as? String == "outcome" }
            #expect(seen["unconfirmed"] as? Bool == true, "a change no commitment confirmed, printed unmarked: \(seen)")
            let text = bob.objects.filter { $0["event"] as? String == "change" }
            #expect(text.allSatisfy { $0["unconfirmed"] as? Bool == true }, "\(text)")
            #expect(try await bob.terminate() == 0, "no check failed: \(bob.stderr)")
        }
    }

    /// With records held aside (one the operator broke) the set cannot be compared with any commitment: the
    /// rest is still unconfirmed, so export writes nothing without the flag, and marks every row with it.
    @Test func recordsHeldAsideLeaveTheRestUnconfirmed() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.walkSharedWithDoctor()
            for occurrence in ["1", "2"] {
                let record = try await world.patient(["outcome", "record", "--activity", "walk", "--occurrence", occurrence, "--value", "30"])
                #expect(record.status == 0, "\(record.stderr)")
            }
            let queue = try ServerDatabase.reader(try #require(world.server.database.sqlitePath))
            let broken = try await queue.read { db in
                try Row.fetchOne(db, sql: "SELECT v.version_id, v.envelope FROM versions v JOIN heads h ON h.version_id = v.version_id LIMIT 1")
                    .map { ($0[0] as String, $0[1] as Data) }
            }
            try queue.close()
            let (versionID, bytes) = try #require(broken)
            let op = ServerOperator.of(world.server.database)
            try await op.dropGuard(of: .versions)
            let edited = try StoredEnvelopeText.edit(bytes) { $0.replacingOccurrences(of: #""ciphertext":""#, with: #""ciphertext":"*"#) }
            try await op.replaceStoredEnvelope(of: versionID, with: [UInt8](edited))

            let file = world.tools.root.appendingPathComponent("held.csv")
            let export = try await world.doctor(["export", "alice", "--format", "csv", "--output", file.path])
            #expect(export.status == 65, "\(export.stderr)")
            #expect(!FileManager.default.fileExists(atPath: file.path), "unconfirmed rows written without --allow-unconfirmed")
            let allowed = try await world.doctor(["export", "alice", "--format", "csv", "--output", file.path, "--allow-unconfirmed"])
            #expect(allowed.status == 65, "the held record still ends it with 65: \(allowed.stderr)")
            let rows = try Self.rows(file)
            // Of three heads one is broken: at least one outcome is left, and every row says unconfirmed.
            #expect(!rows.isEmpty && rows.allSatisfy { $0.hasSuffix(",unconfirmed") }, "\(rows)")
        }
    }

    /// The data rows of a CSV export (its header checked).
    static func rows(_ file: URL) throws -> [String] {
        let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.first?.hasSuffix(",integrity") == true)
        return Array(lines.dropFirst())
    }

    /// Every integrity tag in a FHIR Bundle, its own and each resource's: every one must carry one.
    static func fhirTags(_ text: String) throws -> Set<String> {
        let bundle = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let resources = ((bundle["entry"] as? [[String: Any]]) ?? []).compactMap { $0["resource"] as? [String: Any] }
        var tags = Set<String>()
        for object in [bundle] + resources {
            let tag = ((object["meta"] as? [String: Any])?["tag"] as? [[String: Any]])?.first { $0["system"] as? String == "urn:carevault:integrity" }
            #expect(tag != nil, "\(object["resourceType"] ?? "?") carries no integrity tag")
            if let code = tag?["code"] as? String { tags.insert(code) }
        }
        return tags
    }
}
