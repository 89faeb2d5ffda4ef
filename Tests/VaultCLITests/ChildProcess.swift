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

    /// The exit status, or the signal's number; -1 while the child has not ended (read it after `exited`).
    var terminationStatus: Int32 { lock.withLock { reapLocked()?.status ?? -1 } }
    var endedBySignal: Bool { lock.withLock { reapLocked()?.bySignal ?? false } }

    /// Sends `signal` to this child unless it has been reaped.
    func signalIfRunning(_ signal: Int32) {
        lock.withLock {
            guard pid > 0, reapLocked() == nil else { return }
            kill(pid, signal)
        }
    }

    /// Whether the child has ended (reaping it if it has), or was never started: nothing is left to wait for.
    fileprivate var hasEnded: Bool { lock.withLock { pid == 0 || reapLocked() != nil } }

    /// SIGTERM (graceful shutdown) if still running, without waiting: the wait (with SIGKILL after
    /// `ChildReaper.limit`) and the reaping are handed to `ChildReaper`'s thread. It never blocks the calling
    /// thread, so it is safe on the pool's threads.
    ///
    /// For `defer` blocks and deinits, where nothing follows that needs the child gone. Code that does (a
    /// server stopped before it restarts on its port, a database dropped after its server) uses `await stop()`.
    func stopIfRunning() {
        let running = lock.withLock {
            guard pid > 0, reapLocked() == nil else { return false }
            kill(pid, SIGTERM)
            return true
        }
        if running { ChildReaper.shared.reap(self) }
    }

    /// SIGTERM (graceful shutdown) if still running, then waits for the end without holding a thread (SIGKILL
    /// after `exited`'s limit). Should the wait be cut short (the task cancelled), `ChildReaper` finishes it.
    func stop() async {
        signalIfRunning(SIGTERM)
        do {
            try await exited()
        } catch {
            ChildReaper.shared.reap(self)
        }
    }

    /// Waits for the child's end, at most `limit` seconds; then kills it and throws (its status must not be
    /// read then). A hang ends a CI run at its time limit without naming the test, so nothing here waits
    /// without a limit. The task sleeps between checks: no thread is held meanwhile, which is what the tests'
    /// async code must use (on a two-core machine the pool has two threads, and a blocking wait on one
    /// stalls every task of the test process).
    func exited(limit: TimeInterval = 600) async throws {
        let deadline = Date().addingTimeInterval(limit)
        var pause = 1_000
        while isRunning {
            guard Date() < deadline else { throw killedAsHung(limit: limit) }
            try await Task.sleep(for: .microseconds(pause))
            pause = min(pause * 2, 20_000)
        }
    }

    /// `exited`, blocking the calling thread: only for code that already runs off the pool (inside
    /// `Tools.offPool`, on a dedicated thread).
    func waitForExit(limit: TimeInterval = 600) throws {
        let deadline = Date().addingTimeInterval(limit)
        var pause: useconds_t = 1_000
        while isRunning {
            guard Date() < deadline else { throw killedAsHung(limit: limit) }
            // blocking: waitForExit is for callers off the pool; exited() is the async wait
            usleep(pause)
            pause = min(pause * 2, 20_000)
        }
    }

    /// SIGKILL for a child that outlived its limit; the error that says so.
    private func killedAsHung(limit: TimeInterval) -> ChildHung {
        signalIfRunning(SIGKILL)
        return ChildHung(command: ([executableURL?.lastPathComponent ?? "?"] + arguments).joined(separator: " "), limit: limit)
    }

    deinit {
        // A child still running when its test let go of it: stopped, never left behind. No lock: nothing else
        // holds this object any more (`ChildReaper` keeps a strong reference until it has reaped the child, so
        // a child handed to it is reaped there, never here too). SIGKILL ends the child at once.
        if pid > 0, ending == nil {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == 0 {
                kill(pid, SIGKILL)
                // blocking: after SIGKILL, which ends a child at once
                while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            }
        }
    }
}

/// One thread of the test process that waits for the children handed to it by `stopIfRunning` (after their
/// SIGTERM), sends SIGKILL to those still running after `limit` seconds, and reaps them. A thread of its own,
/// neither Dispatch nor a task: polling blocks it, which must never happen on the pool's threads. It reaps
/// through the child's own lock (`ChildProcess.hasEnded`), so a pid is reaped once, whoever asks first, and
/// never signalled after; it holds each child until then, so the child's deinit cannot reap it as well.
final class ChildReaper: @unchecked Sendable {
    static let shared = ChildReaper()
    /// Seconds after the handover before a child still running gets SIGKILL.
    static let limit: TimeInterval = 30

    private struct Entry {
        let child: ChildProcess
        let killAt: Date
        var killed = false
    }

    private let condition = NSCondition()
    private var entries: [Entry] = []

    private init() {
        let thread = Thread { [self] in run() }
        thread.name = "carevault-test-reaper"
        thread.start()
    }

    /// Waits for `child` (already signalled) on the reaper's thread; returns at once.
    func reap(_ child: ChildProcess) {
        condition.lock()
        entries.append(Entry(child: child, killAt: Date().addingTimeInterval(Self.limit)))
        condition.signal()
        condition.unlock()
    }

    private func run() {
        var pause: TimeInterval = 0.001
        while true {
            condition.lock()
            while entries.isEmpty { condition.wait() }
            var batch = entries
            entries = []
            condition.unlock()
            // Each check takes the child's lock, not `condition`: `reap` never waits for a poll.
            let now = Date()
            batch.removeAll { $0.child.hasEnded }
            for index in batch.indices where !batch[index].killed && now >= batch[index].killAt {
                batch[index].child.signalIfRunning(SIGKILL)
                batch[index].killed = true
            }
            condition.lock()
            entries = batch + entries
            if !batch.isEmpty {
                // Checks again after the pause (1 ms growing to 20 ms), or at once for a child handed over meanwhile.
                if entries.count > batch.count || condition.wait(until: Date().addingTimeInterval(pause)) {
                    pause = 0.001
                } else {
                    pause = min(pause * 2, 0.02)
                }
            } else {
                pause = 0.001
            }
            condition.unlock()
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

/// A child process that did not end within the limit of `exited` or `waitForExit`.
struct ChildHung: Error, CustomStringConvertible {
    var command: String
    var limit: TimeInterval
    var description: String { "\(command) did not end within \(Int(limit)) s (killed)" }
}
