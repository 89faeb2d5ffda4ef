import Foundation

extension Process {
    /// Sends `signal` only while the child has not been reaped. Once Foundation has reaped it, its pid may
    /// belong to anything, on a machine with pid_max 32768 even to a thread of this test process (thread
    /// ids share the pid space, and kill(2) on a thread id signals the whole process): a stray SIGTERM
    /// then shuts down every in-process test server at once, and their clients wait forever.
    func signalIfRunning(_ signal: Int32) {
        guard isRunning else { return }
        kill(processIdentifier, signal)
    }

    /// SIGTERM (graceful shutdown) if still running, then waits for the end.
    func stopIfRunning() {
        signalIfRunning(SIGTERM)
        waitUntilExit()
    }
}
