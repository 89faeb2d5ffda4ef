import Foundation
import Testing

/// Every file the server and the tools create is their owner's alone, the SQLite -wal and -shm files
/// included, while the process runs and after it is killed (Docs/operations.md §4, "Files").
@Suite("End to end: file modes", .serialized)
struct FileModeTests {
    /// The permission bits of `path`, or nil when it does not exist.
    static func mode(_ path: String) -> Int? {
        var s = stat()
        guard stat(path, &s) == 0 else { return nil }
        return Int(s.st_mode & 0o777)
    }

    /// Every regular file under `folder` with its mode.
    static func files(under folder: URL) -> [(String, Int)] {
        let walker = FileManager.default.enumerator(atPath: folder.path)
        var found: [(String, Int)] = []
        while let name = walker?.nextObject() as? String {
            let path = folder.appendingPathComponent(name).path
            var s = stat()
            guard lstat(path, &s) == 0, s.st_mode & S_IFMT == S_IFREG else { continue }
            found.append((name, Int(s.st_mode & 0o777)))
        }
        return found
    }

    @Test func theServersAndTheToolsFilesAreTheirOwnersAloneWhileTheyRun() async throws {
        // The tests' own umask lets group and others read: the tools must not inherit it.
        let previous = umask(0o022)
        defer { umask(previous) }
        try await FaultWorld.run(.sqlite) { world in
            let database = try #require(world.server.database.sqlitePath)
            for path in [database, database + "-wal", database + "-shm"] {
                #expect(Self.mode(path) == 0o600, "\(path): \(String(Self.mode(path) ?? -1, radix: 8))")
            }
            // A sync held up by a stopped server: its local store is open, -wal and -shm included. The store
            // is made anew by this run (SQLite gives -wal and -shm the mode the database file has when they
            // are made, which is before the tool narrows the database file's own).
            let home = world.tools.root.appendingPathComponent("alice")
            for (name, _) in Self.files(under: home) where name.hasSuffix("store.sqlite") {
                try FileManager.default.removeItem(at: home.appendingPathComponent(name))
            }
            let server = try #require(world.server.process)
            kill(server.processIdentifier, SIGSTOP)
            // Whatever fails below, the server runs again, so the world's teardown can stop it.
            defer { kill(server.processIdentifier, SIGCONT) }
            let sync = try world.startPatient(["sync", "--timeout", "30"])
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline, !Self.files(under: home).contains(where: { $0.0.hasSuffix("-wal") }) {
                try await Task.sleep(for: .milliseconds(100))
            }
            let running = Self.files(under: home)
            #expect(running.contains { $0.0.hasSuffix("-wal") } && running.contains { $0.0.hasSuffix("-shm") }, "\(running.map(\.0))")
            for (name, mode) in running { #expect(mode == 0o600, "\(name) is \(String(mode, radix: 8)) while the tool runs") }
            // Killed mid-way, it leaves them as they were.
            #expect(await sync.kill())
            kill(server.processIdentifier, SIGCONT)
            for (name, mode) in Self.files(under: home) { #expect(mode == 0o600, "\(name) is \(String(mode, radix: 8)) after a kill -9") }
        }
    }
}
