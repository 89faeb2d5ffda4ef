import ArgumentParser
import Foundation
import VaultCLI
import VaultClient
import VaultCore

/// `export`: the patient's own data, every category, as JSON or the FHIR R4 Bundle a doctor's export makes.
struct PatientExport: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Export all your data as JSON or a FHIR R4 Bundle (Patient, CarePlan, Observations).",
        discussion: "Example: carevault-patient export --format fhir --output my-care-plan.json"
    )
    enum Format: String, ExpressibleByArgument, CaseIterable { case json, fhir }
    @Option(help: "json or fhir.") var format: Format = .json
    @Option(help: "Write to this file (0600) instead of stdout.") var output: String?
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let vault = try await openVault(options)
        let activities = try await vault.activities()
        let outcomes = try await vault.outcomes()
        let username = vault.account.profile.username
        let data: Data
        switch format {
        case .json:
            let e = JSONEncoder()
            e.outputFormatting = [.prettyPrinted, .sortedKeys]
            e.dateEncodingStrategy = .iso8601
            data = Data(Output.jsonText(try e.encode(ExportedData(username: username, activities: activities, outcomes: outcomes))).utf8)
        case .fhir:
            let bundle = FHIRExport.bundle(patientID: vault.account.profile.userID, username: username, activities: activities, outcomes: outcomes)
            data = Data(Output.jsonText(try JSONSerialization.data(withJSONObject: bundle, options: [.prettyPrinted, .sortedKeys])).utf8)
        }
        if let output {
            try SecureFiles.write(data, to: URL(fileURLWithPath: output))
            Output.note("wrote \(format.rawValue) export to \(output)")
        } else {
            FileHandle.standardOutput.write(data)
            print("")
        }
    }
}

/// The JSON export: the patient's activities and outcomes as this device holds them after its last sync.
struct ExportedData: Encodable {
    var username: String
    var activities: [VaultCore.Activity]
    var outcomes: [VaultCore.Outcome]
}
