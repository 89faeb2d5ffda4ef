import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// `carevault-doctor`: list the patients who share with you and read what they shared (Docs/design.md §7).
@main
struct CareVaultDoctor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "carevault-doctor",
        abstract: "See your patients and read the categories they shared with you.",
        discussion: """
            Data is verified (patient certificate, admin approval, patient-signed grant) and decrypted on this device only.

            Exit status: 0 ok, 64 usage, 65 integrity failure, 69 server unreachable, 75 retry later, 77 not permitted, 78 upgrade the tool, 1 other.
            'watch' runs until SIGINT or SIGTERM (0; 65 if it reported an integrity failure) and retries a server that is gone.

            Example:
              carevault-doctor register --username drbob
              carevault-doctor login --username drbob
              carevault-doctor patients
              carevault-doctor show alice --category interventions
              carevault-doctor adherence alice --from 2026-11-01 --to 2026-11-30
              carevault-doctor export alice --format fhir --output alice.json
              carevault-doctor watch alice
              carevault-doctor dashboard --open
            """,
        version: CareVaultVersion.current,
        subcommands: [
            RegisterCommand<DoctorRole>.self, LoginCommand<DoctorRole>.self, LogoutCommand.self, WhoAmICommand.self, Patients.self, Show.self,
            Adherence.self, Export.self, Watch.self, Dashboard.self, PasswordCommand.self, AccountCommand<DoctorRole>.self, SessionsCommand.self,
        ]
    )

    static func main() async { await ToolRunner.main(Self.self, tool: "carevault-doctor") }
}

func openReader(_ options: GlobalOptions) async throws -> DoctorReader {
    let account = try await options.unlock(as: .doctor)
    return try DoctorReader(account: account, transport: try options.transport(), adminKey: try options.adminPublicKey())
}

/// Whose shared data a command reads, which category and which days.
struct PatientSelection: ParsableArguments {
    @Argument(help: "The patient's username.") var patient: String
    @Option(help: "Only this category.") var category: String?
    @OptionGroup var range: Range
    @OptionGroup var options: GlobalOptions

    /// Reads and decrypts the selected category (or all shared ones) on this device.
    func view(progress: (@Sendable (Int) -> Void)? = nil) async throws -> PatientView {
        try await openReader(options).view(patient: patient, category: category, progress: progress)
    }
}

struct Range: ParsableArguments {
    @Option(help: ArgumentHelp("From this day (YYYY-MM-DD, today, yesterday; default 30 days ago).", valueName: "day")) var from: Day?
    @Option(help: ArgumentHelp("Up to this day, inclusive (YYYY-MM-DD, today, yesterday; default today).", valueName: "day")) var to: Day?

    func resolve() throws -> (Date, Date) {
        let range = try CareInput.range(from: from, to: to ?? .today)
        let end = range.to ?? Date()
        let start = range.from ?? end.addingTimeInterval(-30 * 86_400)
        guard start < end else { throw CLIError.usage("--from is after --to") }
        return (start, end)
    }
}

/// The doctor tool's side of `register` and `login`: doctors' accounts; nothing more happens at login.
enum DoctorRole: ToolRole {
    static let role = Role.doctor
    static func afterLogin(_ account: UnlockedAccount, options: GlobalOptions) async throws -> String { "" }
}

struct Patients: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "My Patients: everyone with an active share naming you that verifies.",
        discussion: "Only patients whose share the patient signed and the admin approved are listed; others the server lists are counted on stderr."
    )
    @OptionGroup var options: GlobalOptions
    func run() async throws {
        let reader = try await openReader(options)
        var list: [ListedPatient] = []
        let (patients, unverified) = try await reader.patients()
        for p in patients { list.append(ListedPatient(summary: p, asOf: try await reader.asOf(patientID: p.patientID))) }
        if unverified > 0 {
            // On stderr, so that stdout (and --json) stays the verified list.
            Output.note(
                "\(unverified) more patient\(unverified == 1 ? "" : "s") listed by the server did not verify "
                    + "(no share signed by the patient and approved by the admin) and \(unverified == 1 ? "is" : "are") not shown"
            )
        }
        let headers = ["PATIENT", "CATEGORIES", "LAST CHANGE", "AS OF"]
        try await Output.show(list, json: options.json, headers: headers, empty: "no patients share data with you yet") {
            list.map { p in
                [p.username, p.categories.joined(separator: ", "), Output.date(millis: p.lastChange), p.asOf.map { Output.date(millis: $0) } ?? "-"]
            }
        }
    }
}

struct Show: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a patient's shared activities and outcomes.",
        discussion: """
            Categories whose records match the patient's newest signed state commitment are shown "as of" its time;
            others are marked "not confirmed" (--json: "complete": false). When the server shows an older state
            than this device accepted (a restored backup) and the cache still holds the accepted one, that is
            shown as of its commitment, with a note (--json: "serverBehind"), until the patient's device brings
            the server up to date. When what the server sent contradicts
            the patient's commitment (exit 65), that category's records are not printed unless --show-unverified,
            which prints them with every row marked UNVERIFIED (--json: under "unverified").

            Example: carevault-doctor show alice --category interventions --from 2026-11-01
            """
    )
    @OptionGroup var selection: PatientSelection
    @Flag(help: "Also print the records of categories that failed their check against the patient's commitment, each marked.")
    var showUnverified = false
    func run() async throws {
        let (from, to) = try selection.range.resolve()
        let progress = ProgressLine()
        let view = try await selection.view(progress: { progress.update("pulled \($0) records") })
        progress.finish()
        let byID = view.activities.byID
        let inRange = { (list: [Outcome], activities: ActivityIndex) in
            list.filter { o in
                guard let start = activities[o.activityID]?.schedule.event(occurrence: o.occurrence)?.start else { return true }
                return start >= from && start < to
            }
        }
        let outcomes = inRange(view.outcomes, byID)
        let unverifiedByID = (view.activities + view.unverifiedActivities).byID
        let unverified = showUnverified ? (view.unverifiedActivities, inRange(view.unverifiedOutcomes, unverifiedByID)) : ([], [])
        if selection.options.json {
            // Written as it is encoded: a large patient's records are never one document in memory.
            let stream = StreamedJSON()
            let shown = ShownPatient(
                selection.patient,
                view: view,
                outcomes: outcomes,
                stream: stream,
                unverified: showUnverified ? UnverifiedRecords(activities: unverified.0, outcomes: unverified.1, stream: stream) : nil
            )
            try stream.writeToStandardOutput(shown)
            noteServerBehind(view)
            try failIfQuarantined(view)
            return
        }
        Output.line("\(selection.patient) — shared with you: \(view.categories.joined(separator: ", "))")
        noteServerBehind(view)
        if !view.asOf.isEmpty { Output.line(asOfText(view.asOf)) }
        for category in view.unconfirmed {
            Output.line("\(category): not confirmed (no state commitment of the patient's matched what the server sent)")
        }
        if view.completenessMessage != nil {
            Output.note(
                showUnverified
                    ? "NOT confirmed complete and current: rows marked UNVERIFIED contradict the patient's commitment"
                    : "NOT confirmed complete and current: the records of those categories are not shown (--show-unverified shows them, marked)"
            )
        }
        print("")
        let mark = { (rows: [[String]], marked: Bool) in rows.map { (marked ? ["UNVERIFIED"] : (showUnverified ? [""] : [])) + $0 } }
        let lead = showUnverified ? ["CHECK"] : []
        Output.table(
            lead + ["ACTIVITY", "TITLE", "CATEGORY", "SCHEDULE", "INSTRUCTIONS"],
            mark(view.activities.map { [$0.id, $0.title, $0.category, CareInput.describe($0.schedule), $0.instructions ?? ""] }, false)
                + mark(unverified.0.map { [$0.id, $0.title, $0.category, CareInput.describe($0.schedule), $0.instructions ?? ""] }, true),
            empty: "no activities"
        )
        print("")
        Output.table(
            lead + Output.outcomeHeaders,
            mark(Output.outcomeRows(outcomes, activities: byID), false) + mark(Output.outcomeRows(unverified.1, activities: unverifiedByID), true),
            empty: "no outcomes in this period"
        )
        if view.unreadable > 0 { Output.note("\(view.unreadable) records use a key not granted to you and were not shown") }
        if !view.awaitingKeys.isEmpty {
            Output.note(
                "approved, keys not delivered yet: \(view.awaitingKeys.joined(separator: ", ")) (the patient's device sends them at its next sync)"
            )
        }
        try failIfQuarantined(view)
    }
}

/// One row of `patients`: the server's summary, and the time of the patient's state commitments this
/// device's cache last checked its views against ("as of"; none before a view with a commitment).
struct ListedPatient: Encodable {
    var patientID: UUID
    var username: String
    var categories: [String]
    var lastChange: UnixMillis
    var asOf: UnixMillis?

    init(summary: PatientSummary, asOf: UnixMillis?) {
        patientID = summary.patientID
        username = summary.username
        categories = summary.categories
        lastChange = summary.lastChange
        self.asOf = asOf
    }
}

/// What `show --json` and `export --format json` print: the view, with the outcomes the command kept. The
/// activities and outcomes are written an element at a time (`StreamedJSON`).
struct ShownPatient: Encodable {
    var patient: String
    var categories: [String]
    var activities: StreamedArray
    var outcomes: StreamedArray
    var unreadable: Int
    var awaitingKeys: [String]
    /// Per category, when the patient signed the state the view was checked against (Unix ms).
    var asOf: [String: UnixMillis]
    /// Whether every category was confirmed complete and current: each has an accepted commitment of the
    /// patient's that matches what was sent.
    var complete: Bool
    /// The categories not confirmed complete and current.
    var notConfirmed: [String]
    /// Categories shown as of the state this device accepted because the server is behind it (a restored
    /// backup): one plain-words note each.
    var serverBehind: [String]
    /// Per category: `verified`, `behind` or `unconfirmed` (Docs/design.md §5.3).
    var integrity: [String: CategoryIntegrity]
    /// With --show-unverified: the records of categories that contradict the patient's commitment.
    var unverified: UnverifiedRecords?

    init(_ patient: String, view: PatientView, outcomes: [Outcome], stream: StreamedJSON, unverified: UnverifiedRecords? = nil) {
        self.patient = patient
        categories = view.categories
        activities = stream.array(view.activities)
        self.outcomes = stream.array(outcomes)
        unreadable = view.unreadable
        awaitingKeys = view.awaitingKeys
        asOf = view.asOf
        complete = view.complete
        notConfirmed = view.unconfirmed
        serverBehind = view.serverBehind
        integrity = view.integrity.categories
        self.unverified = unverified
    }
}

/// Records shown only on request, each list marked by where it stands in `show --json`.
struct UnverifiedRecords: Encodable {
    var activities: StreamedArray
    var outcomes: StreamedArray

    init(activities: [Activity], outcomes: [Outcome], stream: StreamedJSON) {
        self.activities = stream.array(activities)
        self.outcomes = stream.array(outcomes)
    }
}
