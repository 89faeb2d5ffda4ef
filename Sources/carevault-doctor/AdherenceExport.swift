import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

struct Adherence: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Completion per activity: scheduled occurrences against recorded outcomes.",
        discussion: """
            An occurrence counts as done when the patient recorded an outcome for it, whatever its values (CareKit's
            model: an outcome is the record that the event was done; a value of "no" is still an answer).

            Example: carevault-doctor adherence alice --from 2026-11-01 --to 2026-11-14
            """
    )
    @OptionGroup var selection: PatientSelection
    @OptionGroup var unconfirmed: UnconfirmedOption
    func run() async throws {
        let (from, to) = try selection.range.resolve()
        let view = try await selection.view()
        let rows: [AdherenceRow]
        do { rows = try VaultCore.Adherence.rows(activities: view.activities, outcomes: view.outcomes, from: from, to: to) } catch {
            throw ClientError.invalidRequest("cannot list the occurrences in that range: \(error.description)")
        }
        try unconfirmed.check(view, doing: "computed")
        noteServerBehind(view)
        let integrity = view.integrity
        if selection.options.json {
            try Output.json(rows.map { MarkedAdherenceRow($0, integrity: integrity[$0.category]) })
            try failIfQuarantined(view)
            return
        }
        // Every row's integrity, in a column of its own once any category is not verified (Docs/design.md §5.3).
        let marked = integrity.overall != .verified
        Output.line("\(selection.patient): adherence \(Output.date(from, time: false)) to \(Output.date(to.addingTimeInterval(-1), time: false))")
        print("")
        Output.table(
            ["ACTIVITY", "DONE", "RATE", "DAYS (one mark per day: # all done, + some, . none)"] + (marked ? ["CHECK"] : []),
            rows.map { r in
                let chart = r.days.map { $0.completed == 0 ? "." : ($0.completed >= $0.expected ? "#" : "+") }.joined()
                let tenths = Int((r.ratio * 10).rounded())
                let bar = String(repeating: "█", count: tenths) + String(repeating: "░", count: 10 - tenths)
                return [r.activityID, "\(r.completed)/\(r.expected)", "\(bar) \(Int((r.ratio * 100).rounded()))%", chart]
                    + (marked ? [integrity[r.category].rawValue.uppercased()] : [])
            },
            empty: "no activities shared"
        )
        try failIfQuarantined(view)
    }
}

struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Export a patient's shared data as JSON, CSV or a FHIR R4 Bundle.",
        discussion: "Example: carevault-doctor export alice --format fhir --output alice-fhir.json"
    )
    enum Format: String, ExpressibleByArgument, CaseIterable { case json, csv, fhir }
    @Argument(help: "The patient's username.") var patient: String
    @Option(help: "json, csv or fhir.") var format: Format = .json
    @Option(help: "Write to this file (0600) instead of stdout.") var output: String?
    @OptionGroup var unconfirmed: UnconfirmedOption
    @OptionGroup var options: GlobalOptions
    func run() async throws {
        let view = try await openReader(options).view(patient: patient)
        try unconfirmed.check(view, doing: "exported")
        noteServerBehind(view)
        let data: Data
        switch format {
        case .json:
            try writeJSON(view)
            // What verified is exported; the records that did not are named, and the exit status says so.
            try failIfQuarantined(view)
            return
        case .csv:
            data = CSVExport.document(activities: view.activities, outcomes: view.outcomes, integrity: view.integrity)
        case .fhir:
            let bundle = FHIRExport.bundle(
                patientID: view.patient.userID,
                username: patient,
                activities: view.activities,
                outcomes: view.outcomes,
                integrity: view.integrity
            )
            data = Data(Output.jsonText(try JSONSerialization.data(withJSONObject: bundle, options: [.prettyPrinted, .sortedKeys])).utf8)
        }
        if let output {
            try SecureFiles.write(data, to: URL(fileURLWithPath: output))
            Output.note("wrote \(format.rawValue) export of \(patient) to \(output)")
        } else {
            FileHandle.standardOutput.write(data)
            if format == .fhir { print("") }
        }
        // What verified is exported; the records that did not are named, and the exit status says so.
        try failIfQuarantined(view)
    }

    /// The JSON export, written as it is encoded: a large patient's records are never one document in memory.
    func writeJSON(_ view: PatientView) throws {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        e.dateEncodingStrategy = .iso8601
        let stream = StreamedJSON()
        let document = ShownPatient(patient, view: view, outcomes: view.outcomes, stream: stream)
        guard let output else {
            return try stream.writeToStandardOutput(document, encoder: e)
        }
        try SecureFiles.write(to: URL(fileURLWithPath: output)) { fd in try stream.write(document, encoder: e, to: fd) }
        Output.note("wrote json export of \(patient) to \(output)")
    }
}

/// One row of `adherence --json`: the row, and its category's integrity (Docs/design.md §5.3).
struct MarkedAdherenceRow: Encodable {
    var row: AdherenceRow
    var integrity: CategoryIntegrity

    init(_ row: AdherenceRow, integrity: CategoryIntegrity) {
        self.row = row
        self.integrity = integrity
    }

    enum Keys: String, CodingKey { case activityID, title, category, expected, completed, days, integrity }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(row.activityID, forKey: .activityID)
        try c.encode(row.title, forKey: .title)
        try c.encode(row.category, forKey: .category)
        try c.encode(row.expected, forKey: .expected)
        try c.encode(row.completed, forKey: .completed)
        try c.encode(row.days, forKey: .days)
        try c.encode(integrity, forKey: .integrity)
    }
}
