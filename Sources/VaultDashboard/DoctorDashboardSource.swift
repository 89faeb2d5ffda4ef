import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// The doctor's dashboard: every patient who shares with the doctor, read and decrypted by the doctor's
/// own `DoctorReader` (what `patients` and `show` print), and kept current by the same live-update
/// machinery as `carevault-doctor watch` (Docs/events.md).
public struct DoctorDashboardSource: DashboardSource {
    public let reader: DoctorReader
    let transport: Transport
    let reads = SerialReads()

    public init(reader: DoctorReader, transport: Transport) {
        self.reader = reader
        self.transport = transport
    }

    public var role: DashboardRole { .doctor }

    public func triage() async throws -> Triage {
        try await reads.run {
            let (patients, unverified) = try await reader.patients()
            var sheets: [PatientSheet] = []
            for summary in patients { sheets.append(await sheet(summary)) }
            return Triage(sheets: sheets, unverified: unverified)
        }
    }

    public func sheet(patient: String) async throws -> PatientSheet? {
        try await reads.run {
            guard let summary = try await summary(patient) else { return nil }
            return await sheet(summary)
        }
    }

    func summary(_ patient: String) async throws -> PatientSummary? {
        let (patients, _) = try await reader.patients()
        return patients.first { $0.username == patient.lowercased() }
    }

    /// One patient's view, with its integrity state; a view that could not be read (an integrity failure,
    /// a share the server refuses, a bad answer) stays a row, marked with the problem, and never takes
    /// the other patients' rows down with it.
    func sheet(_ summary: PatientSummary) async -> PatientSheet {
        do {
            return Self.sheet(summary, view: try await reader.view(patient: summary.username))
        } catch {
            let error = ClientError.from(error)
            var sheet = PatientSheet.unreadable(
                username: summary.username,
                categories: summary.categories,
                lastChange: summary.lastChange,
                problem: error.description
            )
            if case .integrity = error {} else { sheet.integrity = .unreadable(error.description) }
            return sheet
        }
    }

    static func sheet(_ summary: PatientSummary, view: PatientView) -> PatientSheet {
        var sheet = PatientSheet(
            username: summary.username,
            categories: view.categories,
            activities: view.activities,
            outcomes: view.outcomes,
            lastChange: summary.lastChange,
            asOf: view.asOf.values.min(),
            integrity: integrity(view)
        )
        sheet.awaitingKeys = view.awaitingKeys
        sheet.serverBehind = view.serverBehind
        return sheet
    }

    /// A view's integrity state, as `show` reports it (exit status 65 for a failure). Never "verified"
    /// while records are unreadable here or categories await their keys: what is missing is said.
    static func integrity(_ view: PatientView) -> IntegrityState {
        integrity(
            failure: view.quarantineMessage ?? view.completenessMessage,
            unreadable: view.unreadable,
            awaitingKeys: view.awaitingKeys,
            unconfirmed: view.unconfirmed,
            serverBehind: view.serverBehind
        )
    }

    static func integrity(
        failure: String?,
        unreadable: Int,
        awaitingKeys: [String],
        unconfirmed: [String],
        serverBehind: [String] = []
    ) -> IntegrityState {
        if let failure { return .failure(failure) }
        var missing: [String] = []
        if unreadable > 0 { missing.append("\(unreadable) record\(unreadable == 1 ? "" : "s") this device holds no key for") }
        if !awaitingKeys.isEmpty { missing.append("keys not delivered yet for \(awaitingKeys.joined(separator: ", "))") }
        if !unconfirmed.isEmpty { missing.append("not confirmed: \(unconfirmed.joined(separator: ", "))") }
        if missing.isEmpty { return serverBehind.isEmpty ? .verified : .behind(serverBehind.joined(separator: "; ")) }
        if unreadable == 0, awaitingKeys.isEmpty { return .notConfirmed }
        return .partial(missing.joined(separator: "; "))
    }

    /// The export, from one read of the view under the serial-read guard; refused when the view failed
    /// its integrity check (`ExportRefused`), as `carevault-doctor export` exits 65. A browser has no
    /// `--allow-unconfirmed`: the download is the clinician's explicit step, and it carries the marks.
    public func export(patient: String, format: ExportFormat) async throws -> Data? {
        try await reads.run {
            guard let summary = try await summary(patient) else { return nil }
            let view = try await reader.view(patient: summary.username)
            if let message = view.quarantineMessage ?? view.completenessMessage { throw ExportRefused(message: message) }
            // Unconfirmed or behind data goes out marked, row by row and resource by resource (Docs/design.md §5.3);
            // the page says so beside the links (`IntegrityState.downloadNote`).
            switch format {
            case .csv:
                return CSVExport.document(activities: view.activities, outcomes: view.outcomes, integrity: view.integrity)
            case .fhir:
                let bundle = FHIRExport.bundle(
                    patientID: view.patient.userID,
                    username: summary.username,
                    activities: view.activities,
                    outcomes: view.outcomes,
                    integrity: view.integrity
                )
                return try JSONSerialization.data(withJSONObject: bundle, options: [.prettyPrinted, .sortedKeys])
            }
        }
    }

    /// `carevault-doctor watch`'s loop: each event pulls, verifies and stores what changed; `changed` is
    /// called for each change a pull applied, and when a share began or ended (`LiveChanges` coalesces).
    /// A server that is gone is retried by the stream.
    public func follow(changed: @escaping @Sendable () -> Void) async throws {
        let watch = DoctorWatch(reader: reader, patient: nil)
        let report: @Sendable (AppliedChange) -> Void = { _ in changed() }
        for try await update in try reader.account.events(transport).updates() {
            do {
                switch update {
                case .ready, .resync:
                    // Pages hear of it only when the pull applied something (`report`).
                    _ = try await reads.run { try await watch.refreshAll(report: report) }
                case let .share(_, _, patient):
                    _ = try await reads.run { try await watch.refreshShares(of: patient, report: report) }
                    // A share that began or ended changes the list even when no record moved.
                    changed()
                case let .change(owner, _):
                    _ = try await reads.run { try await watch.refresh(owner: owner, report: report) }
                case let .account(reason):
                    throw ClientError.notPermitted(code: .unauthorized, "the server ended this session's event stream (\(reason))")
                }
            } catch {
                guard LiveRun.isPassing(error) != nil else { throw error }
            }
        }
    }
}
