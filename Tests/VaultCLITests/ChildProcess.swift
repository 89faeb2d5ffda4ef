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

/// The descriptors a child's standard streams come from. Foundation's `Process` on Linux copies them onto
/// 0, 1 and 2 in no fixed order, so a file or pipe that itself sits at 0, 1 or 2 here can be overwritten
/// before it is copied and the child's output goes to /dev/null, its exit status 0. This test process
/// starts without stdin, so descriptor 0 is free whenever nothing else holds it: it was taken for good by
/// the first of the child's files only as long as those files were never closed.
enum ChildStdio {
    /// Takes every free descriptor among 0, 1 and 2 with /dev/null, for good.
    static func claimLowDescriptors() {
        while true {
            let fd = open("/dev/null", O_RDWR)
            guard fd >= 0 else { return }
            if fd > 2 {
                close(fd)
                return
            }
        }
    }

    /// `url`, created empty, open for a child's output at a descriptor above 2.
    static func output(to url: URL) throws -> FileHandle {
        claimLowDescriptors()
        _ = FileManager.default.createFile(atPath: url.path, contents: nil)
        let handle = try FileHandle(forWritingTo: url)
        guard handle.fileDescriptor <= 2 else { return handle }
        let moved = fcntl(handle.fileDescriptor, F_DUPFD_CLOEXEC, 3)
        try handle.close()
        guard moved >= 0 else { throw CocoaError(.fileWriteUnknown) }
        return FileHandle(fileDescriptor: moved, closeOnDealloc: true)
    }
}

extension Process {
    /// One child is started at a time in this test process (the start is short; waiting for the children
    /// still runs in parallel). A precaution only: the SIGSEGV in `memcpy` inside Foundation's `Process.run()`
    /// that this was added for happened with it too, so the short tool runs use `Spawn` instead and only the
    /// long-lived children (servers, `watch`) start here.
    static let spawning = NSLock()

    /// `run()`, then holds the child by a pidfd (see `ChildHandles`).
    func runTracked() throws {
        try Self.spawning.withLock {
            ChildStdio.claimLowDescriptors()
            try run()
        }
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
        // Ended: its pidfd has nothing left to signal, and the files given as its standard streams are
        // closed in this process (left to the `Process` object, a full run of the tests kept hundreds
        // open). Not right after `run()`: closed there, a child's output went missing now and then.
        ChildHandles.forget(self)
        for stream in [standardInput, standardOutput, standardError] {
            // Never this process's own standard streams (a child may be given them).
            guard let file = stream as? FileHandle, file !== FileHandle.nullDevice, file.fileDescriptor > 2 else { continue }
            try? file.close()
        }
    }
}

/// A child process that did not end within the limit of `waitForExit`.
struct ChildHung: Error, CustomStringConvertible {
    var command: String
    var limit: TimeInterval
    var description: String { "\(command) did not end within \(Int(limit)) s (killed)" }
}
