import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A child process of the CLI suites (a server, a `watch`, psql, openssl), started with `Spawn` and reaped
/// by this object alone. Signals reach only this child: a pid is only a number, and once a child is reaped
/// it may belong to anything, on a machine with pid_max 32768 even to a thread of this test process
/// (kill(2) on a thread id signals the whole process, and a stray SIGTERM shuts down every in-process test
/// server at once). So the child is reaped and signalled under one lock, and never signalled once reaped:
/// until then its pid cannot be reused.
final class ChildProcess: @unchecked Sendable {
    /// How a child ended.
    struct Ending: Equatable {
        /// The exit status, or the number of the signal that ended it.
        var status: Int32
        var bySignal: Bool

        init(waitStatus: Int32) {
            let signal = waitStatus & 0x7f
            bySignal = signal != 0
            status = bySignal ? signal : (waitStatus >> 8) & 0xff
        }
    }

    var executableURL: URL?
    var arguments: [String] = []
    /// nil: this process's environment.
    var environment: [String: String]?
    var currentDirectoryURL: URL?
    var standardInput: Spawn.Stream = .null
    var standardOutput: Spawn.Stream = .null
    var standardError: Spawn.Stream = .null

    private let lock = NSLock()
    private var pid: pid_t = 0
    private var ending: Ending?

    var processIdentifier: pid_t { lock.withLock { pid } }

    func run() throws {
        guard let executableURL else { throw Spawn.Failure(description: "no executable") }
        let started = try Spawn.start(
            executableURL.path,
            arguments,
            environment: environment ?? ProcessInfo.processInfo.environment,
            directory: currentDirectoryURL?.path,
            stdin: standardInput,
            stdout: standardOutput,
            stderr: standardError
        )
        lock.withLock { pid = started }
    }

    /// Reaps the child if it has ended; the caller holds the lock.
    private func reapLocked() -> Ending? {
        if let ending { return ending }
        guard pid > 0 else { return nil }
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid {
            ending = Ending(waitStatus: status)
        } else if result == -1 && errno == ECHILD {
            // Not ours to wait for any more (cannot happen unless something else reaped it): treated as ended.
            ending = Ending(waitStatus: 0x7f & SIGKILL)
        }
        return ending
    }

    var isRunning: Bool { lock.withLock { pid > 0 && reapLocked() == nil } }

    /// The exit status, or the signal's number; -1 while the child has not ended (read it after `waitForExit`).
    var terminationStatus: Int32 { lock.withLock { reapLocked()?.status ?? -1 } }
    var endedBySignal: Bool { lock.withLock { reapLocked()?.bySignal ?? false } }

    /// Sends `signal` to this child unless it has been reaped.
    func signalIfRunning(_ signal: Int32) {
        lock.withLock {
            guard pid > 0, reapLocked() == nil else { return }
            kill(pid, signal)
        }
    }

    /// SIGTERM (graceful shutdown) if still running, then waits for the end (SIGKILL after `waitForExit`'s limit).
    func stopIfRunning() {
        signalIfRunning(SIGTERM)
        try? waitForExit()
    }

    /// Waits for the child's end, at most `limit` seconds; then kills it and throws (its status must not be
    /// read then). A hang ends a CI run at its time limit without naming the test, so nothing here waits
    /// without a limit.
    func waitForExit(limit: TimeInterval = 600) throws {
        let deadline = Date().addingTimeInterval(limit)
        var pause: useconds_t = 1_000
        while isRunning {
            guard Date() < deadline else {
                signalIfRunning(SIGKILL)
                throw ChildHung(command: ([executableURL?.lastPathComponent ?? "?"] + arguments).joined(separator: " "), limit: limit)
            }
            usleep(pause)
            pause = min(pause * 2, 20_000)
        }
    }

    deinit {
        // A child still running when its test let go of it: stopped, never left behind.
        if pid > 0, ending == nil {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == 0 {
                kill(pid, SIGKILL)
                while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            }
        }
    }
}

/// Descriptors of this test process.
enum ChildStdio {
    /// Standard output or error into the file at `url`, created empty now (so a test can read it at once).
    static func output(to url: URL) throws -> Spawn.Stream {
        guard FileManager.default.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: url.path])
        }
        return .file(url.path)
    }
}

/// A child process that did not end within the limit of `waitForExit`.
struct ChildHung: Error, CustomStringConvertible {
    var command: String
    var limit: TimeInterval
    var description: String { "\(command) did not end within \(Int(limit)) s (killed)" }
}
