import ArgumentParser
import VaultCLI
import VaultDashboard

struct Dashboard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve a dashboard of your patients to your own browser: triage list, charts, live.",
        discussion: DashboardOptions.discussion + """


            The home page lists every patient who shares with you, those needing attention first (integrity \
            failures, then not confirmed, then low or falling adherence); ?sort=patient|week|month|change orders \
            it otherwise. A patient's page shows activities, an adherence calendar, a chart per numeric activity, \
            notes and links to the CSV and FHIR exports. Changes patients sync show on an open page within seconds.

            Example: carevault-doctor dashboard --open
            """
    )
    @OptionGroup var dashboard: DashboardOptions
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let live = LiveRun(tool: "carevault-doctor")
        live.endOnSignals()
        let reader = try await openReader(options)
        let source = DoctorDashboardSource(reader: reader, transport: try options.transport())
        try await DashboardServer.run(
            source: source,
            port: dashboard.port,
            tool: "carevault-doctor",
            opened: dashboard.opener(tool: "carevault-doctor")
        )
    }
}
