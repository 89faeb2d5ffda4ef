import Foundation
import Testing

/// A server, an approved patient (alice) and doctor (drbob), and alice's interventions shared with drbob:
/// the starting point of the input tests.
struct SharedWorld {
    let tools: Tools
    let server: ChildProcess
    let common: [String: String]

    init() async throws {
        tools = try Tools()
        let adminDir = tools.root.appendingPathComponent("admin")
        try Self.expectOK(try await tools.run("carevault-admin", ["keygen", "--out", adminDir.path]))
        let pub = adminDir.appendingPathComponent("admin.pub")
        let (process, url) = try await tools.startServer(adminPub: pub, database: tools.root.appendingPathComponent("server.sqlite"))
        server = process
        common = [
            "CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path,
        ]
        try Self.expectOK(try await patient(["register", "--username", "alice"]))
        try Self.expectOK(try await doctor(["register", "--username", "drbob"]))
        try Self.expectOK(try await admin(["approve", "--all"]))
        try Self.expectOK(try await patient(["login", "--username", "alice", "--remember"]))
        try Self.expectOK(try await doctor(["login", "--username", "drbob", "--remember"]))
        try Self.expectOK(try await patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]))
        try Self.expectOK(try await admin(["approve", "--all"]))
    }

    struct Failed: Error, CustomStringConvertible {
        var description: String
    }

    static func expectOK(_ r: Tools.Result) throws {
        guard r.status == 0 else { throw Failed(description: "exit \(r.status): \(r.stderr)") }
    }

    func patient(_ args: [String]) async throws -> Tools.Result {
        try await tools.run("carevault-patient", args, home: "alice", password: "alice's long password", extra: common)
    }

    func doctor(_ args: [String]) async throws -> Tools.Result {
        try await tools.run("carevault-doctor", args, home: "bob", password: "bob's long password", extra: common)
    }

    func admin(_ args: [String]) async throws -> Tools.Result { try await tools.run("carevault-admin", args, extra: common) }

    func file(_ name: String, _ text: String) throws -> String {
        let url = tools.root.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        return url.path
    }

    func stop() {
        server.stopIfRunning()
        try? FileManager.default.removeItem(at: tools.root)
    }
}

@Suite("The tools against hostile text and awkward input", .serialized)
struct CLIInputTests {
    /// What a crafted title or note carries: ESC (with a set-title sequence), BEL, CR, DEL, the C1 CSI and
    /// the right-to-left override.
    static let hostile: [Unicode.Scalar] = ["\u{1B}", "\u{07}", "\r", "\u{7F}", "\u{9B}", "\u{202E}"]
    static let title = "Walk\u{1B}]0;pwned\u{07}\r\u{202E}kcab\u{9B}2J\u{7F}"

    static func expectClean(_ text: String, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let raw = text.unicodeScalars.filter { hostile.contains($0) }.map { String($0.value, radix: 16) }
        #expect(raw.isEmpty, "\(what) prints raw control or bidirectional characters: \(raw)", sourceLocation: sourceLocation)
    }

    /// Plain words: no Swift identifier (camelCase) or module name in what a person reads.
    static func expectPlain(_ r: Tools.Result, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let swiftName = r.stderr.range(of: "\\b[a-z]+[A-Z][A-Za-z]*\\b", options: .regularExpression).map { String(r.stderr[$0]) }
        #expect(swiftName == nil && !r.stderr.contains("VaultCore."), "\(what) shows a Swift name: \(r.stderr)", sourceLocation: sourceLocation)
        #expect(r.stderr.contains(": error: "), "\(what): \(r.stderr)", sourceLocation: sourceLocation)
    }

    static func json(_ text: String) throws -> Any { try JSONSerialization.jsonObject(with: Data(text.utf8)) }

    @Test func hostileTextIsShownNeutralisedEverywhere() async throws {
        let w = try await SharedWorld()
        defer { w.stop() }
        let note = String(repeating: "long note ", count: 20_000) + "\u{1B}[2J\u{202E}"  // 200 KB: over the argument limit
        try SharedWorld.expectOK(
            try await w.patient([
                "activity", "add", "--id", "walk", "--title-file", try w.file("title.txt", Self.title + "\n"), "--category", "interventions",
                "--instructions", "brisk\u{1B}[31m red", "--start", "yesterday",
            ])
        )
        try SharedWorld.expectOK(
            try await w.patient([
                "outcome", "record", "--activity", "walk", "--date", "yesterday", "--value", "4200", "--note-file", try w.file("n", note),
            ])
        )

        let list = try await w.patient(["activity", "list"])
        Self.expectClean(list.stdout, "activity list")
        #expect(list.stdout.contains("Walk\\u{1B}]0;pwned\\u{7}\\r\\u{202E}kcab\\u{9B}2J\\u{7F}"), "visible escapes: \(list.stdout)")
        let outcomes = try await w.patient(["outcome", "list"])
        Self.expectClean(outcomes.stdout, "outcome list")
        #expect(outcomes.stdout.contains("long note \\u{1B}[2J\\u{202E}"))
        let show = try await w.doctor(["show", "alice", "--from", "yesterday"])
        Self.expectClean(show.stdout, "doctor show")
        #expect(show.stdout.contains("brisk\\u{1B}[31m red") && show.stdout.contains("\\u{202E}kcab"))
        let csv = try await w.doctor(["export", "alice", "--format", "csv"])
        Self.expectClean(csv.stdout, "CSV export")
        #expect(csv.stdout.contains("\"Walk\\u{1B}]0;pwned"))

        // JSON escapes them and reads back as the original text.
        for (what, r) in [
            ("activity list --json", try await w.patient(["activity", "list", "--json"])),
            ("show --json", try await w.doctor(["show", "alice", "--json", "--from", "yesterday"])),
            ("export json", try await w.doctor(["export", "alice"])),
        ] {
            Self.expectClean(r.stdout, what)
            let parsed = try Self.json(r.stdout)
            let activities = parsed as? [[String: Any]] ?? (parsed as? [String: Any])?["activities"] as? [[String: Any]] ?? []
            let titles = activities.compactMap { $0["title"] as? String }
            #expect(titles == [Self.title], "\(what) keeps the title")
        }
        let fhir = try await w.doctor(["export", "alice", "--format", "fhir"])
        Self.expectClean(fhir.stdout, "FHIR export")
        #expect(fhir.stdout.contains("\\u202E") && (try? Self.json(fhir.stdout)) != nil)
        let notes = try #require(try await Self.json(w.patient(["outcome", "list", "--json"]).stdout) as? [[String: Any]])
        #expect(notes.first?["note"] as? String == String(note), "a note read from a file arrives whole")

        // An error that echoes what was typed echoes it neutralised.
        let missing = try await w.patient(["activity", "update", "--id", "x\u{1B}]0;t\u{07}y", "--title", "z"])
        #expect(missing.status == 1 && missing.stderr.contains("no activity 'x\\u{1B}]0;t\\u{7}y'"), "\(missing.stderr)")
        Self.expectClean(missing.stderr, "the error")
    }

    @Test func usernamesWithEscapesAreNeverEchoedRaw() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        for tool in ["carevault-patient", "carevault-doctor"] {
            let r = try await t.run(tool, ["register", "--username", "bad\u{1B}[31mname\u{202E}"], home: "h", password: "long enough password")
            #expect(r.status == 64, "\(r.stderr)")
            Self.expectClean(r.stderr, "\(tool) register")
            #expect(r.stderr.contains("'bad\\u{1B}[31mname\\u{202E}'"), "\(r.stderr)")
        }
    }

    @Test func badDatesRangesAndOccurrencesExit64InPlainWords() async throws {
        let w = try await SharedWorld()
        defer { w.stop() }
        let add = ["activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions"]
        try SharedWorld.expectOK(try await w.patient(add + ["--start", "yesterday"]))
        let cases: [(String, Tools.Result, String)] = [
            ("negative year", try await w.patient(add + ["--id", "b", "--start=-0001-01-01"]), "is invalid for '--start <day>'"),
            ("year 0", try await w.patient(add + ["--id", "b", "--start", "0000-01-01"]), "is invalid for '--start <day>'"),
            ("extra part", try await w.patient(add + ["--id", "b", "--start", "2026-01-01-1"]), "is invalid for '--start <day>'"),
            ("30 February", try await w.patient(["outcome", "list", "--from", "2026-02-30"]), "is invalid for '--from <day>'"),
            ("words", try await w.doctor(["show", "alice", "--to", "next week"]), "is invalid for '--to <day>'"),
            ("expiry", try await w.patient(["share", "grant", "--doctor", "d", "--category", "c", "--expires", "soon"]), "'--expires <day>'"),
            ("bad category", try await w.patient(add + ["--id", "b", "--category", "Bad_Cat"]), "a category may only hold"),
            ("empty id", try await w.patient(add + ["--id", ""]), "the activity id is empty"),
            ("zero hours", try await w.patient(add + ["--id", "b", "--schedule", "every:0h"]), "out of range"),
            ("year 9999 start", try await w.patient(add + ["--id", "b", "--start", "9999-01-01"]), "outside the years"),
            ("outcome range", try await w.patient(["outcome", "list", "--from", "2026-02-01", "--to", "2026-01-01"]), "--from is after --to"),
            ("show range", try await w.doctor(["show", "alice", "--from", "2026-02-01", "--to", "2026-01-01"]), "--from is after --to"),
            (
                "huge adherence", try await w.doctor(["adherence", "alice", "--from", "0001-01-01", "--to", "9999-12-31"]),
                "ask for a shorter range"
            ),
            (
                "huge occurrence",
                try await w.patient(["outcome", "record", "--activity", "walk", "--occurrence", "9223372036854775807", "--value", "1"]),
                "is too large"
            ),
            ("both texts", try await w.patient(add + ["--id", "b", "--title-file", try w.file("t", "x")]), "not both"),
            ("no title", try await w.patient(["activity", "add", "--id", "b", "--category", "interventions"]), "--title"),
        ]
        for (what, r, words) in cases {
            #expect(r.status == 64, "\(what): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains(words), "\(what): \(r.stderr)")
            Self.expectPlain(r, what)
        }
        #expect(try await w.patient(["outcome", "list", "--from", "2026-01-01", "--to", "2026-01-01"]).status == 0, "one day is a range")
    }

    static func importFile(activities: [[String: Any]], outcomes: [[String: Any]]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: ["activities": activities, "outcomes": outcomes]), as: UTF8.self)
    }

    static var daily: [String: Any] {
        [
            "elements": [
                [
                    "start": "2026-01-01T08:00:00Z", "interval": ["unit": "days", "count": 1], "allDay": false, "duration": 0, "targetValues": [],
                    "timeZoneIdentifier": "UTC",
                ]
            ]
        ]
    }

    static func outcome(_ activity: String, _ occurrence: Int) -> [String: Any] {
        ["activityID": activity, "occurrence": occurrence, "values": [["value": ["type": "number", "number": occurrence], "units": "steps"]]]
    }

    @Test func importWritesThousandsAtOnceOrNothing() async throws {
        let w = try await SharedWorld()
        defer { w.stop() }
        let run: [String: Any] = ["id": "run", "title": "Run", "category": "interventions", "schedule": Self.daily]
        let bad: [(String, [[String: Any]], [[String: Any]], String)] = [
            ("an unknown activity", [run], [Self.outcome("run", 0), Self.outcome("swim", 1)], "outcomes[1]: no activity 'swim'"),
            ("a negative occurrence", [run], (0..<8).map { Self.outcome("run", $0 == 5 ? -1 : $0) }, "outcomes[5]: occurrence -1 is negative"),
            (
                "an empty title", [run, ["id": "x", "title": " ", "category": "interventions", "schedule": Self.daily]], [],
                "activities[1]: the title is empty"
            ),
            ("a missing field", [["id": "x", "title": "X", "category": "interventions"]], [], "activities[0]: the field 'schedule' is missing"),
            ("a repeated id", [run, run], [], "activities[1]: the id 'run' appears twice"),
            (
                "a bad date", [["id": "x", "title": "X", "category": "interventions", "schedule": ["elements": [["start": "soon"]]]]], [],
                "activities[0]: the field 'schedule.elements[0].start': not a date"
            ),
        ]
        for (what, activities, outcomes, words) in bad {
            let r = try await w.patient(["import", try w.file("bad.json", try Self.importFile(activities: activities, outcomes: outcomes))])
            #expect(r.status == 64 && r.stderr.contains(words), "\(what): \(r.status) \(r.stderr)")
        }
        let notJSON = try await w.patient(["import", try w.file("bad.json", "{\"activities\": [")])
        #expect(notJSON.status == 64 && notJSON.stderr.contains("not a JSON object"), "\(notJSON.stderr)")
        #expect(try await w.patient(["activity", "list"]).stdout.contains("no activities yet"), "a refused import writes nothing")

        let file = try w.file("plan.json", try Self.importFile(activities: [run], outcomes: (0..<1000).map { Self.outcome("run", $0) }))
        let started = Date()
        let r = try await w.patient(["import", file, "--json"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try Self.json(r.stdout) as? [String: Int] == ["activities": 1, "added": 1, "outcomes": 1000])
        #expect(Date().timeIntervalSince(started) < 60, "one process, one transaction, one sync")
        let listed = try #require(try await Self.json(w.patient(["outcome", "list", "--json"]).stdout) as? [[String: Any]])
        #expect(listed.count == 1000)
        let shown = try #require(try await Self.json(w.doctor(["export", "alice"]).stdout) as? [String: Any])
        #expect((shown["outcomes"] as? [Any])?.count == 1000, "the import was synced")
    }
}
