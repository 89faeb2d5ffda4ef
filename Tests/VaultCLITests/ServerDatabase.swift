import Foundation
import GRDB
import Testing
import VaultCore
import VaultCrypto

@testable import VaultClient

/// One fresh server database, and how to count what the server stores in it.
struct ServerDatabase {
    let backend: FaultBackend
    /// The `--database` argument of carevault-server.
    let url: String
    let sqlitePath: String?
    let adminURL: String?
    let name: String?

    /// A new database for one test, or nil when PostgreSQL is not configured (an error under CI).
    static func make(_ backend: FaultBackend, in root: URL) async throws -> ServerDatabase? {
        switch backend {
        case .sqlite:
            let path = root.appendingPathComponent("server.sqlite").path
            return ServerDatabase(backend: backend, url: "sqlite:" + path, sqlitePath: path, adminURL: nil, name: nil)
        case .postgres:
            guard let admin = ProcessInfo.processInfo.environment["CAREVAULT_TEST_POSTGRES_URL"] else {
                if ProcessInfo.processInfo.environment["CI"] != nil {
                    throw Tools.ToolMissing(path: "CAREVAULT_TEST_POSTGRES_URL (required under CI)")
                }
                print("note: PostgreSQL backend NOT tested: set CAREVAULT_TEST_POSTGRES_URL (Scripts/test does this)")
                return nil
            }
            let name = "cv_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            _ = try await psql(admin, "CREATE DATABASE \(name)")
            guard var parts = URLComponents(string: admin) else { throw Tools.ToolMissing(path: "a valid CAREVAULT_TEST_POSTGRES_URL") }
            parts.path = "/" + name
            return ServerDatabase(backend: backend, url: parts.string!, sqlitePath: nil, adminURL: admin, name: name)
        }
    }

    func drop() async {
        if let adminURL, let name { _ = try? await Self.psql(adminURL, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
    }

    /// What the server stores: every version, every head (one per record), and distinct records among versions.
    struct Counts: Equatable, CustomStringConvertible {
        var versions: Int
        var heads: Int
        var recordsWithVersions: Int
        var description: String { "\(versions) versions, \(heads) heads, \(recordsWithVersions) records" }
    }

    func counts() async throws -> Counts {
        let sql = "SELECT (SELECT count(*) FROM versions), (SELECT count(*) FROM heads), (SELECT count(DISTINCT record_id) FROM versions)"
        if let sqlitePath {
            let queue = try Self.reader(sqlitePath)
            defer { try? queue.close() }
            return try await queue.read { db in
                let row = try Row.fetchOne(db, sql: sql)!
                return Counts(versions: row[0], heads: row[1], recordsWithVersions: row[2])
            }
        }
        let fields = try await Self.psql(url, sql).split(separator: "|").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard fields.count == 3 else { throw Tools.ToolMissing(path: "psql answered something unexpected") }
        return Counts(versions: fields[0], heads: fields[1], recordsWithVersions: fields[2])
    }

    /// A read-only connection to the server's SQLite file. The server writes beside it (WAL); it waits
    /// out a checkpoint instead of failing.
    static func reader(_ path: String) throws -> DatabaseQueue {
        var config = Configuration()
        config.readonly = true
        config.busyMode = .timeout(5)
        return try DatabaseQueue(path: path, configuration: config)
    }

    /// Runs one statement with psql and returns its unaligned output; waited for without holding a thread
    /// (`ChildProcess.exited`).
    static func psql(_ url: String, _ sql: String) async throws -> String {
        let out = psqlOutput()
        defer { try? FileManager.default.removeItem(at: out) }
        let p = try startPsql(url, sql, output: out)
        try await p.exited(limit: 120)
        return try psqlResult(p, sql, output: out)
    }

    /// `psql`, blocking the calling thread: only for code that runs off the pool (`Tools.offPool`).
    static func psqlBlocking(_ url: String, _ sql: String) throws -> String {
        let out = psqlOutput()
        defer { try? FileManager.default.removeItem(at: out) }
        let p = try startPsql(url, sql, output: out)
        // blocking: psqlBlocking runs only inside Tools.offPool
        try p.waitForExit(limit: 120)
        return try psqlResult(p, sql, output: out)
    }

    /// Where one psql run writes its output: a file, not a pipe (a pipe read to its end would wait without
    /// the limit of `exited`).
    private static func psqlOutput() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("carevault-psql-\(UUID().uuidString)")
    }

    private static func startPsql(_ url: String, _ sql: String, output: URL) throws -> ChildProcess {
        let p = ChildProcess()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql]
        p.standardOutput = try ChildStdio.output(to: output)
        p.standardError = .null
        try p.run()
        return p
    }

    private static func psqlResult(_ p: ChildProcess, _ sql: String, output: URL) throws -> String {
        guard p.terminationStatus == 0 else { throw Tools.ToolMissing(path: "psql could not run: \(sql)") }
        return try String(contentsOf: output, encoding: .utf8)
    }
}

extension ServerDatabase {
    /// A cheap reader of the number of stored versions, for polling while the server writes: one
    /// read-only connection kept open (SQLite), or psql per call (PostgreSQL).
    /// Its reader blocks the calling thread: for code that runs off the pool (`Tools.offPool`).
    func versionCounter() throws -> () throws -> Int {
        let sql = "SELECT count(*) FROM versions"
        if let sqlitePath {
            let queue = try Self.reader(sqlitePath)
            return { try queue.read { try Int.fetchOne($0, sql: sql) ?? 0 } }
        }
        let url = url
        return {
            guard let n = Int(try Self.psqlBlocking(url, sql).trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw Tools.ToolMissing(path: "psql answered something unexpected")
            }
            return n
        }
    }
}

extension ServerDatabase {
    /// The rows of one query, each column as text (SQLite: a text column; PostgreSQL: psql's unaligned output).
    func strings(_ sql: String) async throws -> [[String]] {
        if let sqlitePath {
            let queue = try Self.reader(sqlitePath)
            defer { try? queue.close() }
            return try await queue.read { db in
                try Row.fetchAll(db, sql: sql).map { row in
                    (0..<row.count).map { i in
                        let value: DatabaseValue = row[i]
                        switch value.storage {
                        case let .string(text): return text
                        case let .int64(n): return String(n)
                        case let .double(d): return String(d)
                        case .blob, .null: return ""
                        }
                    }
                }
            }
        }
        return try await Self.psql(url, sql).split(separator: "\n").map {
            $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
        }
    }
}
