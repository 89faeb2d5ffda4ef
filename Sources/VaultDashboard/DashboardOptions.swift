import ArgumentParser
import Foundation
import VaultCLI

/// The options of `carevault-doctor dashboard` and `carevault-patient dashboard`.
public struct DashboardOptions: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp("Listen on this port of 127.0.0.1 (default: a free port).", valueName: "port"))
    public var port: Int = 0

    @Flag(help: "Open the dashboard in the default browser (xdg-open or open).")
    public var open = false

    public init() {}

    public func validate() throws {
        // Below 1024 is refused: a browser leaves :80 out of the Host it sends, and the Host check needs it.
        guard port == 0 || (1024...65_535).contains(port) else { throw ValidationError("--port must be 0 (a free port) or 1024 to 65535") }
    }

    /// The discussion both tools' help shows.
    public static let discussion = """
        Serves the dashboard on 127.0.0.1 only and prints, first on stdout, \
        `dashboard: http://127.0.0.1:PORT/s/PREFIX/?token=...`. Open that link in a browser on this machine: the \
        token works once, for a cookie (HttpOnly, SameSite=Strict, sent only under this run's random path \
        prefix) that holds a different secret; every page without it answers 401, every path outside the prefix \
        404, and a Host other than 127.0.0.1 on that port is refused (403). Pages are built here from this \
        device's decrypted view; nothing decrypted is sent to the server. Runs until SIGINT or SIGTERM (exit \
        status 0). See Docs/dashboard.md.
        """

    /// With --open, hands the desktop's opener a file holding the URL, never the URL itself: a program's
    /// arguments are readable by every user of the machine (/proc/PID/cmdline). The file is 0600 in a new
    /// 0700 folder (under $XDG_RUNTIME_DIR when set), and is removed once the token has been used or the
    /// tool ends. What the returned closure does: remove it.
    public func opener(tool: String) -> @Sendable (String) -> @Sendable () -> Void {
        guard open else { return { _ in {} } }
        return { url in
            let candidates = ["/usr/bin/xdg-open", "/usr/bin/open"]
            guard let path = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
                Output.note("\(tool): no browser opener found (xdg-open); open the link above by hand")
                return {}
            }
            let file: URL
            do { file = try OpenFile.write(url: url) } catch {
                Output.note("\(tool): could not write the file to open (\(error)); open the link above by hand")
                return {}
            }
            // blocking: the browser opener is started and never waited for
            let p = Process()
            p.executableURL = URL(fileURLWithPath: path)
            p.arguments = [file.path]
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            do { try p.run() } catch { Output.note("\(tool): could not start \(path); open the link above by hand") }
            return { OpenFile.remove() }
        }
    }
}

/// The file --open hands the browser: a page that sends it on to the dashboard's URL. One per process,
/// removed at exit (including the exit on SIGINT or SIGTERM) if not before.
public enum OpenFile {
    nonisolated(unsafe) private static var folder: String?
    private static let lock = NSLock()

    /// Writes the page in a fresh 0700 folder as a 0600 file, and returns its location.
    public static func write(url: String) throws -> URL {
        let env = ProcessInfo.processInfo.environment
        let parent = env["XDG_RUNTIME_DIR"].flatMap { FileManager.default.isWritableFile(atPath: $0) ? $0 : nil } ?? NSTemporaryDirectory()
        var template = Array((parent.hasSuffix("/") ? parent : parent + "/").appending("carevault-dashboard-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw CocoaError(.fileWriteUnknown) }
        let dir = String(cString: made)
        lock.withLock { folder = dir }
        atexit { OpenFile.remove() }
        let file = URL(fileURLWithPath: dir).appendingPathComponent("open.html")
        let escaped = url.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
        let page = """
            <!DOCTYPE html><html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">\
            <meta http-equiv="refresh" content="0;url=\(escaped)"><title>CareVault dashboard</title></head>\
            <body>Opening the dashboard…</body></html>

            """
        let fd = Foundation.open(file.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw CocoaError(.fileWriteNoPermission) }
        defer { close(fd) }
        let bytes = Array(page.utf8)
        guard Foundation.write(fd, bytes, bytes.count) == bytes.count else { throw CocoaError(.fileWriteUnknown) }
        return file
    }

    /// Removes the file and its folder, if still there.
    public static func remove() {
        guard
            let dir = lock.withLock({ () -> String? in
                defer { folder = nil }
                return folder
            })
        else { return }
        unlink(dir + "/open.html")
        rmdir(dir)
    }
}
