import ArgumentParser
import VaultCLI
import VaultDashboard

struct PatientDashboard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dashboard",
        abstract: "Serve your own dashboard to your browser, read-only: activities, charts, shares, access log.",
        discussion: DashboardOptions.discussion + """


            It shows the records on this device (run 'carevault-patient sync' to bring in other devices' \
            changes, then reload), your shares with their state and expiry, and your verified access log.

            Example: carevault-patient dashboard --open
            """
    )
    @OptionGroup var dashboard: DashboardOptions
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let live = LiveRun(tool: "carevault-patient")
        live.endOnSignals()
        let source = PatientDashboardSource(vault: try await openVault(options))
        try await DashboardServer.run(
            source: source,
            port: dashboard.port,
            tool: "carevault-patient",
            opened: dashboard.opener(tool: "carevault-patient")
        )
    }
}
