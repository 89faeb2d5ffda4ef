import Foundation
import Testing

/// Setting up the server's database as Docs/operations.md §4 says, and the mistakes it warns about: a role
/// that may not create tables (PostgreSQL 15's schema public) is named with PostgreSQL's own words and a
/// hint, with exit 77; a deployment that names PostgreSQL never falls back to a new SQLite file.
@Suite("Server: database set-up errors in plain words")
struct ServerDatabaseSetupTests {
    @Test func aRoleThatMayNotCreateTablesIsNamedWithPostgreSQLsWordsAndExit77() async throws {
        guard let admin = ProcessInfo.processInfo.environment["CAREVAULT_TEST_POSTGRES_URL"] else {
            try #require(ProcessInfo.processInfo.environment["CI"] == nil, "CAREVAULT_TEST_POSTGRES_URL is required under CI")
            print("note: PostgreSQL backend NOT tested: set CAREVAULT_TEST_POSTGRES_URL (Scripts/test does this)")
            return
        }
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        #expect(try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin").path]).status == 0)
        let suffix = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(12)
        let (role, name) = ("cv_role_\(suffix)", "cv_grant_\(suffix)")
        // What the obvious recipe does on PostgreSQL 15: every right on the database, none on schema public.
        _ = try await ServerDatabase.psql(admin, "CREATE ROLE \(role) LOGIN")
        // Dropped whether the test returns or throws (awaited, so not in a `defer`).
        try await withCleanup {
            _ = try await ServerDatabase.psql(admin, "CREATE DATABASE \(name)")
            _ = try await ServerDatabase.psql(admin, "GRANT ALL ON DATABASE \(name) TO \(role)")
            var parts = try #require(URLComponents(string: admin))
            parts.user = role
            parts.password = nil
            parts.path = "/" + name
            parts.query = "sslmode=disable"
            let url = try #require(parts.string)
            let pub = t.root.appendingPathComponent("admin/admin.pub").path
            let r = try await t.run("carevault-server", ["--admin-key", pub, "--port", "0", "--database", url])
            #expect(r.status == 77, "\(r.stderr)")
            #expect(r.stderr.contains("PostgreSQL refused the migration: permission denied for schema public (SQLSTATE 42501)"), "\(r.stderr)")
            #expect(r.stderr.contains("hint: ") && r.stderr.contains("createdb -O carevault carevault"), "\(r.stderr)")
            #expect(!r.stderr.contains("Generic description"), "\(r.stderr)")
            #expect(r.stderr.contains("carevault-server: storage: PostgreSQL at \(parts.host ?? ""):\(parts.port ?? 5432)/\(name)"), "\(r.stderr)")
        } cleanup: {
            _ = try? await ServerDatabase.psql(admin, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            _ = try? await ServerDatabase.psql(admin, "DROP ROLE IF EXISTS \(role)")
        }
    }

    @Test func noSilentSQLiteWhereTheEnvironmentNamesPostgreSQL() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        #expect(try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin").path]).status == 0)
        let pub = t.root.appendingPathComponent("admin/admin.pub").path
        let cases: [([String: String], String)] = [
            (["PGHOST": "db.internal"], "PGHOST names PostgreSQL"),
            // A URL that reached the environment under another name, and a password never echoed.
            (["DATABASE_URL": "postgres://carevault:sekrit@db.internal/carevault"], "DATABASE_URL names PostgreSQL"),
        ]
        for (extra, message) in cases {
            let r = try await t.run("carevault-server", ["--admin-key", pub, "--port", "0"], extra: extra)
            #expect(r.status == 64, "\(extra.keys): \(r.stderr)")
            #expect(r.stderr.contains(message) && r.stderr.contains("refusing to start on a new, empty SQLite database"), "\(r.stderr)")
            #expect(r.stderr.contains("quoted"), "the hint says how to quote: \(r.stderr)")
            #expect(!r.stderr.contains("sekrit"))
        }
    }

    /// Starts the server on `database` until it listens, stops it with SIGTERM, and returns its exit status
    /// and what it wrote on stderr.
    static func startAndStop(_ t: Tools, adminPub: String, database: String) async throws -> (Int32, String) {
        let p = ChildProcess()
        p.executableURL = Tools.bin.appendingPathComponent("carevault-server")
        p.arguments = ["--admin-key", adminPub, "--port", "0", "--database", database]
        p.environment = t.env
        let out = t.root.appendingPathComponent("out-\(UUID().uuidString)")
        let err = t.root.appendingPathComponent("err-\(UUID().uuidString)")
        p.standardOutput = try ChildStdio.output(to: out)
        p.standardError = try ChildStdio.output(to: err)
        try p.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, (try? String(contentsOf: out, encoding: .utf8))?.contains("listening on") != true {
            try await Task.sleep(for: .milliseconds(50))
        }
        p.signalIfRunning(SIGTERM)
        try await p.exited(limit: 30)
        return (p.terminationStatus, try String(contentsOf: err, encoding: .utf8))
    }

    /// An upgrade says in the log what it changed in the database, and a stop says it was clean.
    @Test func theLogNamesEachMigrationAppliedAndTheStop() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        #expect(try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin").path]).status == 0)
        let pub = t.root.appendingPathComponent("admin/admin.pub").path
        let db = "sqlite:" + t.root.appendingPathComponent("server.sqlite").path
        let (status, first) = try await Self.startAndStop(t, adminPub: pub, database: db)
        #expect(status == 0, "\(first)")
        #expect(first.contains("carevault-server: storage: SQLite at \(t.root.appendingPathComponent("server.sqlite").path)"), "\(first)")
        #expect(first.contains("migration=v1-initial") && first.contains("applied migration"), "\(first)")
        #expect(first.contains("stopped"), "\(first)")
        let (again, second) = try await Self.startAndStop(t, adminPub: pub, database: db)
        #expect(again == 0)
        #expect(!second.contains("applied migration"), "nothing left to apply: \(second)")
        #expect(second.contains("stopped"))
    }
}
