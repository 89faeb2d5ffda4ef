import Foundation
import Testing

/// A watching tool (`carevault-doctor watch`, `carevault-patient sync --watch`) started in the background,
/// its stdout and stderr in files the test reads as they grow.
final class Watcher: @unchecked Sendable {
    let process: ChildProcess
    let out: URL
    let err: URL

    init(_ world: FaultWorld, _ tool: String, _ args: [String], home: String, password: String) throws {
        let t = world.tools
        let p = ChildProcess()
        p.executableURL = Tools.bin.appendingPathComponent(tool)
        p.arguments = args
        var e = t.env.merging(world.common) { _, b in b }
        e["CAREVAULT_HOME"] = t.root.appendingPathComponent(home).path
        e["CAREVAULT_PASSWORD"] = password
        p.environment = e
        out = t.root.appendingPathComponent("watch-out-\(UUID().uuidString)")
        err = t.root.appendingPathComponent("watch-err-\(UUID().uuidString)")
        p.standardOutput = try ChildStdio.output(to: out)
        p.standardError = try ChildStdio.output(to: err)
        p.standardInput = .null
        try p.run()
        process = p
    }

    var stdout: String { (try? String(contentsOf: out, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOf: err, encoding: .utf8)) ?? "" }

    /// Every complete line of stdout read as a JSON object (a line that is not one fails the test).
    var objects: [[String: Any]] {
        stdout.split(separator: "\n").compactMap { line in
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object != nil, "not a JSON object: \(line)")
            return object
        }
    }

    /// Waits until a line of stdout matches, at most `limit` seconds (the tool's output is the event
    /// waited for; it is read as it is written). Fails when the tool ended or the time ran out.
    @discardableResult
    func waitFor(_ what: String, limit: TimeInterval = 60, _ match: @escaping ([String: Any]) -> Bool) async throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(limit)
        while Date() < deadline {
            if let found = objects.first(where: match) { return found }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("no line for \(what) within \(Int(limit)) s; stdout:\n\(stdout)\nstderr:\n\(stderr)")
        throw WatchTimeout()
    }

    /// SIGTERM, then its exit status.
    func terminate() async throws -> Int32 {
        process.signalIfRunning(SIGTERM)
        let process = process
        return try await Tools.offPool {
            // blocking: inside Tools.offPool
            try process.waitForExit(limit: 60)
            return process.terminationStatus
        }
    }

    /// Its exit status once it ends by itself (at most `limit` seconds).
    func exitStatus(limit: TimeInterval = 60) async throws -> Int32 {
        let process = process
        return try await Tools.offPool {
            // blocking: inside Tools.offPool
            try process.waitForExit(limit: limit)
            return process.terminationStatus
        }
    }

    struct WatchTimeout: Error {}
}

extension FaultWorld {
    static let doctorPassword = "bob's long password"

    @discardableResult
    func doctor(_ args: [String], home: String = "bob") async throws -> Tools.Result {
        try await tools.run("carevault-doctor", args, home: home, password: Self.doctorPassword, extra: common)
    }

    @discardableResult
    func admin(_ args: [String]) async throws -> Tools.Result {
        try await tools.run("carevault-admin", args, extra: common)
    }

    /// Doctor "drbob" (home "bob") added, and alice's activity "walk" in interventions shared with him,
    /// approved and synced.
    func walkSharedWithDoctor() async throws {
        try await addDoctor("drbob", home: "bob")
        let add = try await patient([
            "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
        ])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(try await patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
        #expect(try await admin(["approve", "--all"]).status == 0)
        #expect(try await patient(["sync"]).status == 0)
    }

    /// Registers, approves and logs in a doctor in home `home`.
    func addDoctor(_ username: String, home: String) async throws {
        #expect(try await doctor(["register", "--username", username], home: home).status == 0)
        #expect(try await admin(["approve", "--all"]).status == 0)
        let login = try await doctor(["login", "--username", username, "--remember"], home: home)
        #expect(login.status == 0, "\(login.stderr)")
    }
}
