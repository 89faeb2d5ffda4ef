import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// The patient's dashboard, read-only: the records this device holds (as `activity list` and `outcome
/// list` read them), the shares from the patient's own signed ledger and the verified access log. It
/// never syncs: what another device changed shows after this device's next `sync`.
public struct PatientDashboardSource: DashboardSource {
    public let vault: PatientVault

    public init(vault: PatientVault) { self.vault = vault }

    public var role: DashboardRole { .patient }

    var username: String { vault.account.profile.username }

    public func triage() async throws -> Triage { Triage(sheets: [], unverified: 0) }

    public func sheet(patient: String) async throws -> PatientSheet? {
        guard patient.lowercased() == username else { return nil }
        return try await own()
    }

    /// The patient's own sheet: local records, shares and access log.
    public func own() async throws -> PatientSheet {
        let activities = try await vault.activities()
        let outcomes = try await vault.outcomes()
        let categories = Array(Set(activities.map(\.category))).sorted()
        // Records written on this device were signed by it; there is no commitment to check them against.
        var sheet = PatientSheet(
            username: username,
            categories: categories,
            activities: activities,
            outcomes: outcomes,
            lastChange: nil,
            asOf: Date().unixMillis,
            integrity: .ownDevice
        )
        let kept = try await vault.quarantined()
        if !kept.isEmpty {
            sheet.integrity = .failure(
                "\(kept.count) records from the server failed their check and are kept aside (carevault-patient sync --verbose)"
            )
        }
        sheet.shares = try await vault.doctors().doctors
        sheet.names = try await vault.memberNames()
        // The access log's own problem is said in its own section; it never hides the records' state.
        do { sheet.accessLog = try await vault.verifiedAccessLog() } catch let error as ClientError {
            if case let .integrity(message) = error {
                sheet.accessLogProblem = "the access log did not verify: \(message)"
            } else {
                sheet.accessLogProblem = "the access log could not be read: \(error.description)"
            }
        }
        return sheet
    }

    /// Refused while records from the server are kept aside (`ExportRefused`): the file would silently
    /// lack them.
    public func export(patient: String, format: ExportFormat) async throws -> Data? {
        guard let sheet = try await sheet(patient: patient) else { return nil }
        if case let .failure(message) = sheet.integrity { throw ExportRefused(message: message) }
        switch format {
        case .csv:
            return CSVExport.document(activities: sheet.activities, outcomes: sheet.outcomes)
        case .fhir:
            let bundle = FHIRExport.bundle(
                patientID: vault.account.profile.userID,
                username: username,
                activities: sheet.activities,
                outcomes: sheet.outcomes
            )
            return try JSONSerialization.data(withJSONObject: bundle, options: [.prettyPrinted, .sortedKeys])
        }
    }

    /// Nothing is followed: the patient's dashboard shows this device's records, and a reload shows them again.
    public func follow(changed: @escaping @Sendable () -> Void) async throws {}
}
