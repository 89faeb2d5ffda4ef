import Foundation
import Testing

/// The operations guide's backup and restore, run as written against a server process (Docs/operations.md
/// §5): a backup taken while the server runs, a day of work after it, the older copy restored; the
/// patient's next `sync` says the server is behind and re-sends what the restore lost, and a new device
/// then finds everything (Docs/design.md §5.2).
@Suite("End to end: restoring an older backup, and the patient's device healing it", .serialized)
struct RestoreCLITests {
    /// Runs a program to its end; its status.
    static func run(_ tool: String, _ args: [String]) async throws -> Int32 {
        try await Tools.offPool {
            let p = ChildProcess()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = [tool] + args
            p.standardOutput = .null
            p.standardError = .null
            try p.run()
            // blocking: inside Tools.offPool
            try p.waitForExit()
            return p.terminationStatus
        }
    }

    @Test(arguments: FaultBackend.allCases)
    func anOlderBackupRestoredIsHealedByThePatientsNextSync(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            let add = { (id: String) in
                try await world.patient(["activity", "add", "--id", id, "--title", id, "--category", "interventions", "--schedule", "daily@08:00"])
            }
            #expect(try await add("walk").status == 0)
            let copy = try await Self.backUp(world)
            #expect(try await add("run").status == 0)
            #expect(try await add("swim").status == 0)
            try await Self.restore(copy, world)

            let healed = try await world.patient(["sync"])
            #expect(healed.status == 0, "\(healed.stderr)")
            #expect(healed.stderr.contains("the server is behind what this device last saw (interventions"), "\(healed.stderr)")
            #expect(healed.stderr.contains("re-sending 3 versions"), "\(healed.stderr)")
            let again = try await world.patient(["sync"])
            #expect(again.status == 0 && !again.stderr.contains("behind"), "\(again.stderr)")
            // A new device of the patient finds everything the restore had lost.
            #expect(try await world.patient(["login", "--username", "alice"], home: "alice-2").status == 0)
            let list = try await world.patient(["activity", "list"], home: "alice-2")
            #expect(list.status == 0, "\(list.stderr)")
            for id in ["walk", "run", "swim"] { #expect(list.stdout.contains(id), "\(id): \(list.stdout)") }
        }
    }

    /// A share approved after the backup raised the tresor's key declaration: the restored server serves an
    /// older one. Every device that saw the newer one declares its own again at its next sync (it takes
    /// nothing from the older one) and says so, instead of refusing every command (Docs/design.md §5.2).
    @Test(arguments: FaultBackend.allCases)
    func aKeyDeclarationNewerThanTheBackupIsDeclaredAgainByTheDevice(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            try await world.addDoctor("drbob", home: "bob")
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            let copy = try await Self.backUp(world)
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)
            let delivered = try await world.patient(["sync"])
            #expect(delivered.status == 0, "\(delivered.stderr)")
            try await Self.restore(copy, world)

            let healed = try await world.patient(["sync"])
            #expect(healed.status == 0, "\(healed.stderr)")
            #expect(healed.stderr.contains("the key declaration of interventions: it shows version"), "\(healed.stderr)")
            #expect(healed.stderr.contains("re-sent this device's declaration"), "\(healed.stderr)")
            for args in [
                ["sync"], ["doctors"],
                ["activity", "add", "--id", "run", "--title", "Run", "--category", "interventions", "--schedule", "daily@09:00"],
            ] {
                let r = try await world.patient(args)
                #expect(r.status == 0, "\(args): \(r.stderr)")
                #expect(!r.stderr.contains("older key declaration"), "\(args): \(r.stderr)")
            }
            // A new device of the patient takes the declaration the device sent.
            #expect(try await world.patient(["login", "--username", "alice"], home: "alice-2").status == 0)
            let list = try await world.patient(["activity", "list"], home: "alice-2")
            #expect(list.status == 0 && list.stdout.contains("run"), "\(list.stdout)\(list.stderr)")
        }
    }

    /// The backup of the world's database, taken while the server runs (Docs/operations.md §5).
    static func backUp(_ world: FaultWorld) async throws -> URL {
        let copy = world.tools.root.appendingPathComponent("backup-\(UUID().uuidString.prefix(8))")
        let database = world.server.database
        if let path = database.sqlitePath {
            #expect(try await Self.run("sqlite3", ["-bail", path, ".backup '\(copy.path)'"]) == 0)
        } else {
            #expect(try await Self.run("pg_dump", ["--format=custom", "--file=\(copy.path)", database.url]) == 0)
        }
        return copy
    }

    /// The restore: the server stopped, the older copy put in place, the server started again.
    static func restore(_ copy: URL, _ world: FaultWorld) async throws {
        let database = world.server.database
        await world.server.stop()
        if let path = database.sqlitePath {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            try FileManager.default.copyItem(atPath: copy.path, toPath: path)
        } else {
            let (admin, name) = (try #require(database.adminURL), try #require(database.name))
            _ = try await ServerDatabase.psql(admin, "DROP DATABASE \(name) WITH (FORCE)")
            _ = try await ServerDatabase.psql(admin, "CREATE DATABASE \(name)")
            #expect(try await Self.run("pg_restore", ["--no-owner", "-d", database.url, copy.path]) == 0)
        }
        try await world.server.start()
    }
}
