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

    public func triage() async throws -> [PatientSheet] {
        try await reads.run {
            let (patients, _) = try await reader.patients()
            var sheets: [PatientSheet] = []
            for summary in patients { sheets.append(try await sheet(summary)) }
            return sheets
        }
    }

    public func sheet(patient: String) async throws -> PatientSheet? {
        try await reads.run { try await unqueuedSheet(patient: patient) }
    }

    func unqueuedSheet(patient: String) async throws -> PatientSheet? {
        let (patients, _) = try await reader.patients()
        guard let summary = patients.first(where: { $0.username == patient.lowercased() }) else { return nil }
        return try await sheet(summary)
    }

    /// One patient's view, with its integrity state; a view that failed outright stays a row, marked.
    func sheet(_ summary: PatientSummary) async throws -> PatientSheet {
        let view: PatientView
        do { view = try await reader.view(patient: summary.username) } catch let error as ClientError {
            guard case .integrity = error else { throw error }
            return .unreadable(username: summary.username, categories: summary.categories, lastChange: summary.lastChange, problem: error.description)
        }
        var sheet = PatientSheet(
            username: summary.username,
            categories: view.categories,
            activities: view.activities,
            outcomes: view.outcomes,
            lastChange: summary.lastChange,
            asOf: view.asOf.values.min(),
            integrity: Self.integrity(view)
        )
        sheet.awaitingKeys = view.awaitingKeys
        return sheet
    }

    /// A view's integrity state, as `show` reports it (exit status 65 for a failure).
    static func integrity(_ view: PatientView) -> IntegrityState {
        if let message = view.quarantineMessage ?? view.completenessMessage { return .failure(message) }
        return view.unconfirmed.isEmpty ? .verified : .notConfirmed
    }

    public func export(patient: String, format: ExportFormat) async throws -> Data? {
        guard let sheet = try await sheet(patient: patient) else { return nil }
        switch format {
        case .csv:
            return CSVExport.document(activities: sheet.activities, outcomes: sheet.outcomes)
        case .fhir:
            let view = try await reader.view(patient: sheet.username)
            let bundle = FHIRExport.bundle(
                patientID: view.patient.userID,
                username: sheet.username,
                activities: sheet.activities,
                outcomes: sheet.outcomes
            )
            return try JSONSerialization.data(withJSONObject: bundle, options: [.prettyPrinted, .sortedKeys])
        }
    }

    /// `carevault-doctor watch`'s loop: each event pulls, verifies and stores what changed; `changed` is
    /// called after every pull that applied something. A server that is gone is retried by the stream.
    public func follow(changed: @escaping @Sendable () -> Void) async throws {
        let watch = DoctorWatch(reader: reader, patient: nil)
        let report: @Sendable (AppliedChange) -> Void = { _ in changed() }
        for try await update in try reader.account.events(transport).updates() {
            do {
                switch update {
                case .ready, .share, .resync:
                    _ = try await reads.run { try await watch.refreshAll(report: report) }
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
