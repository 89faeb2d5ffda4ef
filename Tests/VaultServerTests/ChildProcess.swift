import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Runs a short-lived tool and waits for it with waitpid. Not Foundation's Process: it learns that a child
/// ended through a descriptor the child inherits, and a PostgreSQL server another test starts meanwhile
/// inherits that descriptor too, so the wait would last as long as that server (see `ThrowawayPostgres.run`).
enum ChildProcess {
    /// The exit status of `argv` (its output discarded), or -1 when it could not start or was killed. The
    /// wait blocks a thread of its own, started for it, while the calling task is suspended: not one of the
    /// cooperative pool's (two on a two-core machine, which every test running beside this one needs
    /// meanwhile), nor Dispatch's shared ones.
    static func run(_ argv: [String]) async -> Int32 {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: runBlocking(argv)) }
            thread.name = "carevault-test-child"
            thread.start()
        }
    }

    /// The same as `run`, under the name its older callers use.
    static func runDetached(_ argv: [String]) async -> Int32 {
        await run(argv)
    }

    /// `run`, on the calling thread: blocks it until the child ends.
    private static func runBlocking(_ argv: [String]) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        // Nothing else is inherited (see `ThrowawayPostgres.run`): not the descriptors through which
        // Foundation's Process, in tests running meanwhile, learns that its children ended.
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        }
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        var pid = pid_t()
        guard posix_spawnp(&pid, argv[0], &actions, nil, cArguments, environ) == 0 else { return -1 }
        var status: Int32 = 0
        // blocking: runBlocking runs on a thread of its own (run)
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return status & 0x7f == 0 ? (status >> 8) & 0xff : -1
    }
}
