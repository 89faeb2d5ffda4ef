import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Runs a program to its end with `posix_spawn` and `waitpid`, for the tool runs that make up most of the
/// CLI suites. Foundation's `Process.run()` crashed this test process several times (SIGSEGV in `memcpy`
/// inside it, on a thread starting a tool while the other suites ran), so the short runs that are waited for
/// at once do not go through it; the long-lived children (servers, `watch`) still do.
enum Spawn {
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let closeFrom: CloseFrom? = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: CloseFrom.self)
    }()

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs `executable` with `arguments` and exactly `environment`, standard input from /dev/null and
    /// standard output and error written to the files `stdout` and `stderr` (created, owner-only). Returns the
    /// exit status, or the signal's number when a signal ended it (as `Process.terminationStatus` does).
    static func run(_ executable: String, _ arguments: [String], environment: [String: String], stdout: String, stderr: String) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // Nothing else of this process's (sockets, pipes of other children) goes to the child: glibc 2.34 on
        // has `posix_spawn_file_actions_addclosefrom_np`, which the Swift module does not declare.
        if let closeFrom = closeFrom { _ = closeFrom(&actions, 3) }

        // The child starts with default signal dispositions and nothing blocked, whatever this process set.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid: pid_t = 0
        let started = argv.withUnsafeBufferPointer { a in
            envp.withUnsafeBufferPointer { e in
                posix_spawn(
                    &pid,
                    executable,
                    &actions,
                    &attributes,
                    UnsafeMutablePointer(mutating: a.baseAddress!),
                    UnsafeMutablePointer(mutating: e.baseAddress!)
                )
            }
        }
        guard started == 0 else { throw Failure(description: "posix_spawn \(executable): \(String(cString: strerror(started)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { throw Failure(description: "waitpid \(pid): \(String(cString: strerror(errno)))") }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : signal
    }
}
