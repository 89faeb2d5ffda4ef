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
        _ = try ServerDatabase.psql(admin, "CREATE ROLE \(role) LOGIN")
        _ = try ServerDatabase.psql(admin, "CREATE DATABASE \(name)")
        defer {
            _ = try? ServerDatabase.psql(admin, "DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            _ = try? ServerDatabase.psql(admin, "DROP ROLE IF EXISTS \(role)")
        }
        _ = try ServerDatabase.psql(admin, "GRANT ALL ON DATABASE \(name) TO \(role)")
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
}
