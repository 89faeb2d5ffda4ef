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
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
    }

    /// The discussion both tools' help shows.
    public static let discussion = """
        Serves the dashboard on 127.0.0.1 only and prints, first on stdout, `dashboard: http://127.0.0.1:PORT/?token=...`. \
        Open that link in a browser on this machine: the token is exchanged for a cookie (HttpOnly, SameSite=Strict) \
        and every page without it answers 401; a Host other than 127.0.0.1 or localhost on that port is refused (403). \
        Pages are built here from this device's decrypted view; nothing decrypted is sent to the server. \
        Runs until SIGINT or SIGTERM (exit status 0). See Docs/dashboard.md.
        """

    /// With --open, hands the URL to the desktop's opener; says so on stderr when there is none.
    public func opener(tool: String) -> @Sendable (String) -> Void {
        guard open else { return { _ in } }
        return { url in
            let candidates = ["/usr/bin/xdg-open", "/usr/bin/open"]
            guard let path = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
                Output.note("\(tool): no browser opener found (xdg-open); open the link above by hand")
                return
            }
            let p = Process()
            p.executableURL = URL(fileURLWithPath: path)
            p.arguments = [url]
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            do { try p.run() } catch { Output.note("\(tool): could not start \(path); open the link above by hand") }
        }
    }
}
