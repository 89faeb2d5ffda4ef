import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// Signals for child processes that can never reach another process. A pid is only a number: once
/// Foundation has reaped a child, its pid may belong to anything, on a machine with pid_max 32768 even to
/// a thread of this test process (thread ids share the pid space, and kill(2) on a thread id signals the
/// whole process), and a stray SIGTERM shuts down every in-process test server at once. So each child
/// is held by a pidfd taken as soon as it runs, and signalled through it: a child that is gone gives
/// ESRCH, never someone else's signal.
enum ChildHandles {
    private static let pidfds = NIOLockedValueBox<[ObjectIdentifier: Int32]>([:])
    private typealias PidfdOpen = @convention(c) (pid_t, UInt32) -> Int32
    private typealias PidfdSendSignal = @convention(c) (Int32, Int32, UnsafeMutableRawPointer?, UInt32) -> Int32
    // glibc 2.36 has both wrappers; Swift's Glibc module does not show them.
    private static let open: PidfdOpen? = dlsym(nil, "pidfd_open").map { unsafeBitCast($0, to: PidfdOpen.self) }
    private static let send: PidfdSendSignal? = dlsym(nil, "pidfd_send_signal").map { unsafeBitCast($0, to: PidfdSendSignal.self) }

    static func track(_ p: Process) {
        guard let open, p.processIdentifier > 0 else { return }
        let fd = open(p.processIdentifier, 0)
        guard fd >= 0 else { return }
        pidfds.withLockedValue { $0[ObjectIdentifier(p)] = fd }
    }

    /// Sends `signal` through the child's pidfd; false when there is none (then the caller falls back).
    static func signal(_ p: Process, _ signal: Int32) -> Bool {
        guard let send, let fd = pidfds.withLockedValue({ $0[ObjectIdentifier(p)] }) else { return false }
        _ = send(fd, signal, nil, 0)
        return true
    }

    static func forget(_ p: Process) {
        if let fd = pidfds.withLockedValue({ $0.removeValue(forKey: ObjectIdentifier(p)) }) { close(fd) }
    }
}

extension Process {
    /// `run()`, then holds the child by a pidfd (see `ChildHandles`).
    func runTracked() throws {
        try run()
        ChildHandles.track(self)
    }

    /// Sends `signal` to this child only: through its pidfd, else (no pidfd) only while it is unreaped.
    func signalIfRunning(_ signal: Int32) {
        if ChildHandles.signal(self, signal) { return }
        guard isRunning else { return }
        kill(processIdentifier, signal)
    }

    /// SIGTERM (graceful shutdown) if still running, then waits for the end (SIGKILL after `waitForExit`'s limit).
    func stopIfRunning() {
        signalIfRunning(SIGTERM)
        try? waitForExit()
        ChildHandles.forget(self)
    }

    /// Waits for the child's end by polling `isRunning`, at most `limit` seconds; then kills it and throws
    /// (its status must not be read then). Not `waitUntilExit`: a full run here was once left hung for good,
    /// no child process left and threads of the test process waiting, and a hang ends a CI run at its
    /// time limit without naming the test.
    func waitForExit(limit: TimeInterval = 600) throws {
        let deadline = Date().addingTimeInterval(limit)
        while isRunning {
            guard Date() < deadline else {
                signalIfRunning(SIGKILL)
                throw ChildHung(command: ([executableURL?.lastPathComponent ?? "?"] + (arguments ?? [])).joined(separator: " "), limit: limit)
            }
            usleep(2_000)
        }
    }
}

/// A child process that did not end within the limit of `waitForExit`.
struct ChildHung: Error, CustomStringConvertible {
    var command: String
    var limit: TimeInterval
    var description: String { "\(command) did not end within \(Int(limit)) s (killed)" }
}
