import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Starts programs with `posix_spawn`, for every child of the CLI suites. Not Foundation's `Process`: on
/// Linux its `run()` looks for the highest open descriptor by reading /proc/self/fd and copies each entry's
/// whole 256-byte `d_name`, past the end of the entry; with the thousand-odd descriptors a full run of the
/// tests holds, an entry at the end of the buffer sat at the end of a mapped page now and then, and the
/// copy ended the test process with SIGSEGV in `memcpy` (four fresh-clone runs, the same libc offset).
enum Spawn {
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    // glibc 2.34 has both; the Swift module does not declare them.
    private static let closeFrom: CloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: CloseFrom.self) }
    private static let addChdir: AddChdir? = dlsym(nil, "posix_spawn_file_actions_addchdir_np").map { unsafeBitCast($0, to: AddChdir.self) }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Where one of a child's standard streams goes.
    enum Stream {
        /// /dev/null.
        case null
        /// The file at this path, created (owner-only) or emptied.
        case file(String)
    }

    /// Starts `executable` with `arguments` and exactly `environment`, in its own process group (as
    /// Foundation's `Process` starts it, so a terminal's Ctrl-C is not passed on), with default signal
    /// dispositions, nothing blocked, and no descriptor of this process but the three given. Returns its pid.
    static func start(
        _ executable: String,
        _ arguments: [String],
        environment: [String: String],
        directory: String? = nil,
        stdin: Stream = .null,
        stdout: Stream,
        stderr: Stream
    ) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (target, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            switch stream {
            case .null: posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path): posix_spawn_file_actions_addopen(&actions, target, path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            }
        }
        // Without it every child would inherit each descriptor of this process not marked close-on-exec, and a
        // long-lived server could hold another test's pipe open (its reader never seeing the end).
        guard let closeFrom, closeFrom(&actions, 3) == 0 else {
            throw Failure(description: "posix_spawn_file_actions_addclosefrom_np is missing or failed (glibc < 2.34)")
        }
        if let directory {
            guard let addChdir else { throw Failure(description: "posix_spawn_file_actions_addchdir_np is missing (glibc < 2.29)") }
            _ = addChdir(&actions, directory)
        }

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
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

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
        return pid
    }

    /// Runs `executable` to its end, standard input from /dev/null and standard output and error written
    /// to the files `stdout` and `stderr`. Returns the exit status, or the signal's number when a signal
    /// ended it.
    static func run(_ executable: String, _ arguments: [String], environment: [String: String], stdout: String, stderr: String) throws -> Int32 {
        let pid = try start(executable, arguments, environment: environment, stdout: .file(stdout), stderr: .file(stderr))
        var status: Int32 = 0
        // blocking: Spawn.run is called only off the pool
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { throw Failure(description: "waitpid \(pid): \(String(cString: strerror(errno)))") }
        }
        return ChildProcess.Ending(waitStatus: status).status
    }
}
