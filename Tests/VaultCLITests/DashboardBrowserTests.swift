import Foundation
import GRDB
import Testing
import VaultTestSupport

/// `carevault-doctor dashboard` and `carevault-patient dashboard` in a real browser (Docs/dashboard.md):
/// Tests/Browser/dashboard_test.py drives headless Chromium through Playwright against the real tools and
/// a real server, and checks the triage list, the charts, markup in titles staying inert text, 401 without
/// the token, a foreign Host refused, and a patient's sync showing on an open page within 2 s. Scripts/test
/// installs Chromium and Playwright and sets CAREVAULT_BROWSER_PYTHON; under CI a missing browser fails.
/// One test needs no browser: a record damaged on the server, and what the doctor's dashboard makes of it.
@Suite("End to end: the dashboards in a real browser", .serialized)
struct DashboardBrowserTests {
    /// Titles and notes written as markup: each must show as text and run nothing.
    static let hostile = [
        "<img src=x onerror=\"window.pwned=1\">", "</script><script>window.pwned=2</script>", "\"><svg onload=\"window.pwned=3\">",
    ]

    static var root: URL { Tools.bin.deletingLastPathComponent().deletingLastPathComponent() }

    /// The Python with Playwright, and the browser; nil (with the reason printed) outside CI when either is
    /// missing. Under CI their absence is a failure.
    static func browser() -> (python: String, chromium: String)? {
        let env = ProcessInfo.processInfo.environment
        let chromium = env["CAREVAULT_CHROMIUM"] ?? "/usr/bin/chromium"
        let python = env["CAREVAULT_BROWSER_PYTHON"]
        var missing: [String] = []
        if python.map({ !FileManager.default.isExecutableFile(atPath: $0) }) ?? true {
            missing.append("Playwright for Python (CAREVAULT_BROWSER_PYTHON unset or not executable)")
        }
        if !FileManager.default.isExecutableFile(atPath: chromium) { missing.append("Chromium at \(chromium)") }
        guard missing.isEmpty, let python else {
            let text = "the browser tests need \(missing.joined(separator: " and ")); Scripts/test installs them"
            if env["CI"] == "true" { Issue.record("\(text) (under CI they must run)") } else { print("note: SKIPPED: \(text)") }
            return nil
        }
        return (python, chromium)
    }

    /// Starts a dashboard tool and returns it with the URL it printed first on stdout.
    static func startDashboard(_ world: FaultWorld, _ tool: String, home: String, password: String) async throws -> (Watcher, String) {
        let watcher = try Watcher(world, tool, ["dashboard"], home: home, password: password)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if let first = watcher.stdout.split(separator: "\n", omittingEmptySubsequences: false).first, watcher.stdout.contains("\n") {
                let line = String(first)
                #expect(line.hasPrefix("dashboard: http://127.0.0.1:"), "the first line on stdout: \(line)")
                #expect(line.contains("/s/") && line.contains("/?token="))
                return (watcher, String(line.dropFirst("dashboard: ".count)))
            }
            guard watcher.process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("\(tool) dashboard printed no URL; stderr:\n\(watcher.stderr)")
        throw Watcher.WatchTimeout()
    }

    static func day(_ offset: Int) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.dateFormat = "yyyy-MM-dd"
        return f.string(from: Date().addingTimeInterval(Double(offset) * 86_400))
    }

    @Test func bothDashboardsInChromium() async throws {
        guard let browser = Self.browser() else { return }
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            // alice and carl share with drbob; dana shares with nobody and must not be listed.
            for name in ["carl", "dana"] {
                #expect(try await world.patient(["register", "--username", name], home: name).status == 0)
                #expect(try await world.admin(["approve", "--all"]).status == 0)
                #expect(try await world.patient(["login", "--username", name, "--remember"], home: name).status == 0)
            }
            let start = ["--start", Self.day(-6), "--schedule", "daily@08:00"]
            let steps: [([String], String)] = [
                (
                    ["activity", "add", "--id", "walk", "--title", Self.hostile[0], "--category", "interventions", "--target", "30 min"] + start,
                    "alice"
                ),
                (["activity", "add", "--id", "pill", "--title", Self.hostile[1], "--category", "interventions"] + start, "alice"),
                (["outcome", "record", "--activity", "walk", "--occurrence", "0", "--value", "20", "--units", "min"], "alice"),
                (
                    ["outcome", "record", "--activity", "walk", "--occurrence", "1", "--value", "35", "--units", "min", "--note", Self.hostile[2]],
                    "alice"
                ),
                (["outcome", "record", "--activity", "walk", "--occurrence", "2", "--value", "28", "--units", "min"], "alice"),
                (["outcome", "record", "--activity", "pill", "--occurrence", "1", "--value", "yes"], "alice"),
                (["outcome", "record", "--activity", "pill", "--occurrence", "2", "--value", "no"], "alice"),
                (["share", "grant", "--doctor", "drbob", "--category", "interventions"], "alice"),
                (["activity", "add", "--id", "stretch", "--title", "Stretch", "--category", "assessments"] + start, "carl"),
                (["share", "grant", "--doctor", "drbob", "--category", "assessments"], "carl"),
                (["activity", "add", "--id", "nap", "--title", "Nap", "--category", "interventions"] + start, "dana"),
            ]
            for (args, home) in steps {
                let r = try await world.patient(args, home: home)
                #expect(r.status == 0, "\(home) \(args): \(r.stderr)")
            }
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            for home in ["alice", "carl"] { #expect(try await world.patient(["sync"], home: home).status == 0) }

            let (doctor, doctorURL) = try await Self.startDashboard(world, "carevault-doctor", home: "bob", password: FaultWorld.doctorPassword)
            defer { doctor.process.stopIfRunning() }
            let (patient, patientURL) = try await Self.startDashboard(world, "carevault-patient", home: "alice", password: FaultWorld.password)
            defer { patient.process.stopIfRunning() }

            let out = Self.root.appendingPathComponent(".build/dashboard-artifacts")
            try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
            let hostileFile = world.tools.root.appendingPathComponent("hostile.json")
            try JSONSerialization.data(withJSONObject: Self.hostile).write(to: hostileFile)
            let sync = [
                Tools.bin.appendingPathComponent("carevault-patient").path, "outcome", "record", "--activity", "walk", "--occurrence", "3", "--value",
                "41", "--units", "min",
            ]
            let script = Self.root.appendingPathComponent("Tests/Browser/dashboard_test.py").path
            let args = [
                script, "--doctor-url", doctorURL, "--patient-url", patientURL, "--patients", "alice,carl", "--chart-patient", "alice",
                "--chart-activity", "walk", "--points", "3", "--hostile-file", hostileFile.path, "--sync-command",
                String(decoding: try JSONSerialization.data(withJSONObject: sync), as: UTF8.self), "--out", out.path, "--chromium",
                browser.chromium,
            ]
            var env = world.tools.env.merging(world.common) { _, b in b }
            env["CAREVAULT_HOME"] = world.tools.root.appendingPathComponent("alice").path
            env["CAREVAULT_PASSWORD"] = FaultWorld.password
            let log = world.tools.root.appendingPathComponent("browser.out")
            let errors = world.tools.root.appendingPathComponent("browser.err")
            let childEnv = env
            let status = try await Tools.offPool { try Spawn.run(browser.python, args, environment: childEnv, stdout: log.path, stderr: errors.path) }
            let text = ((try? String(contentsOf: log, encoding: .utf8)) ?? "") + ((try? String(contentsOf: errors, encoding: .utf8)) ?? "")
            print(text)
            #expect(status == 0, "the browser checks failed:\n\(text)\ndoctor dashboard stderr:\n\(doctor.stderr)")
            for shot in ["dashboard-doctor-triage.png", "dashboard-doctor.png", "dashboard-patient.png"] {
                #expect(FileManager.default.fileExists(atPath: out.appendingPathComponent(shot).path), "\(shot) written")
            }
            // The token is printed once, as the first line, and never logged.
            #expect(!doctor.stderr.contains("token"), "\(doctor.stderr)")
            #expect(try await doctor.terminate() == 0, "\(doctor.stderr)")
            #expect(try await patient.terminate() == 0, "\(patient.stderr)")
        }
    }

    /// Exchanges the link's token for the cookie, then GETs each path under the link's prefix; prints one
    /// line per path, tab-separated: its status, whether the body says "integrity failure", and the first
    /// line of the body.
    static let client = """
        import http.client, sys, urllib.parse
        link = urllib.parse.urlsplit(sys.argv[1])
        prefix = link.path.rstrip("/")
        def get(path, cookie=None):
            c = http.client.HTTPConnection(link.hostname, link.port, timeout=30)
            c.request("GET", path, headers={"Cookie": cookie} if cookie else {})
            r = c.getresponse()
            body = r.read().decode("utf-8", "replace")
            c.close()
            return r, body
        r, _ = get(link.path + "?" + link.query)
        cookie = r.getheader("Set-Cookie").split(";")[0]
        for path in sys.argv[2:]:
            r, body = get(prefix + path, cookie)
            marked = "integrity failure" in body
            print(f"{r.status}\t{marked}\t{body.strip().splitlines()[0] if body.strip() else ''}")
        """

    /// A record damaged on the server: the doctor's triage row and page say "integrity failure" with the
    /// reason, and neither export hands out a file that silently lacks the record (502, as `export` exits 65).
    @Test func aRecordThatFailsItsCheckIsMarkedAndNotExported() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            for (id, title) in [("walk", "Walk"), ("run", "Run")] {
                let add = try await world.patient(["activity", "add", "--id", id, "--title", title, "--category", "interventions"])
                #expect(add.status == 0, "\(add.stderr)")
            }
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            #expect(try await world.patient(["sync"]).status == 0)

            let path = try #require(world.server.database.sqlitePath)
            let queue = try DatabaseQueue(path: path)
            let original = try await queue.read { db -> (String, Data) in
                let row = try Row.fetchOne(
                    db,
                    sql: "SELECT v.version_id, v.envelope FROM versions v JOIN heads h ON h.version_id = v.version_id LIMIT 1"
                )!
                return (row[0], row[1])
            }
            let op = ServerOperator.sqliteFile(path)
            try await op.dropGuard(of: .versions)
            let broken = try StoredEnvelopeText.edit(original.1) { $0.replacingOccurrences(of: #""ciphertext":""#, with: #""ciphertext":"*"#) }
            try await op.replaceStoredEnvelope(of: original.0, with: [UInt8](broken))

            let cli = try await world.doctor(["export", "alice", "--format", "csv"], home: "bob")
            #expect(cli.status == 65, "the command-line export: \(cli.stderr)")

            let (doctor, link) = try await Self.startDashboard(world, "carevault-doctor", home: "bob", password: FaultWorld.doctorPassword)
            defer { doctor.process.stopIfRunning() }
            let out = world.tools.root.appendingPathComponent("client.out")
            let err = world.tools.root.appendingPathComponent("client.err")
            let args = ["-c", Self.client, link, "/", "/patient/alice", "/patient/alice/export.csv", "/patient/alice/export.fhir.json"]
            let status = try await Tools.offPool { try Spawn.run("/usr/bin/python3", args, environment: [:], stdout: out.path, stderr: err.path) }
            let lines = ((try? String(contentsOf: out, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            #expect(status == 0, "\((try? String(contentsOf: err, encoding: .utf8)) ?? "")")
            try #require(lines.count == 4, "\(lines)")
            #expect(lines[0].hasPrefix("200\tTrue\t"), "the triage row says so: \(lines[0])")
            #expect(lines[1].hasPrefix("200\tTrue\t"), "the patient's page says so: \(lines[1])")
            for export in lines[2...] {
                #expect(export.hasPrefix("502\tFalse\t"), "\(export)")
                #expect(export.contains("alice"), "the reason names the patient: \(export)")
            }
            #expect(try await doctor.terminate() == 0, "\(doctor.stderr)")
        }
    }
}
