import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The clinic's own PostgreSQL cluster, which it restarts mid-run (a fault the clinic must ride through):
/// initialised in a temporary folder with PostgreSQL's default durability (fsync and synchronous commit on,
/// as a deployment runs it, unlike the throwaway cluster of the tests), listening on 127.0.0.1 on a free
/// port, run as `CAREVAULT_TEST_POSTGRES_RUN_AS` when this process is root. Needs the binaries
/// Scripts/with-postgres names in `CAREVAULT_TEST_POSTGRES_BIN`.
struct ClinicPostgres: Sendable {
    let bin: String
    let runAs: String?
    let directory: String
    let port: Int
    var url: String { "postgres://postgres@127.0.0.1:\(port)/carevault" }

    static var binDirectory: String? { ProcessInfo.processInfo.environment["CAREVAULT_TEST_POSTGRES_BIN"].flatMap { $0.isEmpty ? nil : $0 } }

    /// The cluster's folder is made in the temporary folder, not in the run's own (0700, as the bench's
    /// umask makes it), which the account PostgreSQL runs as could not enter.
    static func start(maxConnections: Int) async throws -> ClinicPostgres {
        guard let bin = binDirectory else {
            throw BenchError("the clinic on PostgreSQL needs CAREVAULT_TEST_POSTGRES_BIN (Scripts/bench runs it through Scripts/with-postgres)")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-clinic-pg-\(shortID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let runAs = ProcessInfo.processInfo.environment["CAREVAULT_TEST_POSTGRES_RUN_AS"].flatMap { $0.isEmpty ? nil : $0 }
        chmod(directory, 0o755)
        if let runAs, let account = getpwnam(runAs) { chown(directory, account.pointee.pw_uid, account.pointee.pw_gid) }
        let pg = ClinicPostgres(bin: bin, runAs: runAs, directory: directory, port: try FreePort.pick())
        try await pg.run("initdb", ["-D", "\(directory)/data", "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        let conf = """

            listen_addresses = '127.0.0.1'
            port = \(pg.port)
            unix_socket_directories = '\(directory)'
            max_connections = \(maxConnections)
            shared_buffers = 256MB
            log_min_duration_statement = 250
            shared_preload_libraries = 'pg_stat_statements'
            pg_stat_statements.track = top
            log_line_prefix = '%m [%p] '

            """
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(directory)/data/postgresql.conf"))
        handle.seekToEndOfFile()
        handle.write(Data(conf.utf8))
        try handle.close()
        try await pg.run("pg_ctl", ["-D", "\(directory)/data", "-l", pg.logFile, "-w", "-t", "60", "start"])
        try await pg.run("createdb", ["-h", "127.0.0.1", "-p", String(pg.port), "-U", "postgres", "carevault"])
        try await ClinicDatabase.withPostgres(pg.url) { client, logger in
            _ = try await client.query("CREATE EXTENSION pg_stat_statements", logger: logger)
        }
        return pg
    }

    /// The server's log: statements slower than 250 ms are written there (the clinic reports how many).
    var logFile: String { "\(directory)/server.log" }

    /// A restart as an operator's `systemctl restart` does it: fast shutdown (clients disconnected), start.
    func restart() async throws {
        try await run("pg_ctl", ["-D", "\(directory)/data", "-l", logFile, "-m", "fast", "-w", "-t", "60", "restart"])
    }

    func destroy() async {
        _ = await Spawn.run(command("pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "stop"]))
        try? FileManager.default.removeItem(atPath: directory)
    }

    func run(_ tool: String, _ arguments: [String]) async throws {
        let status = await Spawn.run(command(tool, arguments))
        guard status == 0 else { throw BenchError("\(tool) \(arguments.last ?? "") failed (exit status \(status)); see \(logFile)") }
    }

    func command(_ tool: String, _ arguments: [String]) -> [String] {
        let command = ["\(bin)/\(tool)"] + arguments
        return runAs.map { ["runuser", "-u", $0, "--"] + command } ?? command
    }
}

/// Short-lived tools waited for with waitpid, off the cooperative pool. Not Foundation's Process: it learns
/// that a child ended through a descriptor the child inherits, and the server `pg_ctl start` leaves behind
/// inherits it too, so the wait would last as long as that server.
enum Spawn {
    static func run(_ argv: [String]) async -> Int32 {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: runNow(argv)) }
        }
    }

    static func runNow(_ argv: [String]) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        }
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        var pid = pid_t()
        guard posix_spawnp(&pid, argv[0], &actions, nil, cArguments, environ) == 0 else { return -1 }
        var status: Int32 = 0
        // blocking: Spawn.run runs on DispatchQueue.global, not the pool
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return status & 0x7f == 0 ? (status >> 8) & 0xff : -1
    }
}

/// A port nobody listens on now: the kernel's pick for a socket bound to port 0.
enum FreePort {
    static func pick() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw BenchError("could not find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
