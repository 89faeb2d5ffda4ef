import Foundation
import VaultAPI
import VaultClient
import VaultCore

/// Where a dashboard's pages come from: the user's own decrypted view on this machine. The doctor's
/// reads the patients who share with them; the patient's reads its own vault, read-only.
public protocol DashboardSource: Sendable {
    /// Which tool serves it, for titles and for what the home page is.
    var role: DashboardRole { get }
    /// The doctor's triage list: one row per patient who shares with them (empty for a patient).
    func triage() async throws -> [PatientSheet]
    /// One patient's page; nil when there is no such patient here (404).
    func sheet(patient: String) async throws -> PatientSheet?
    /// An export of one patient's records, built on this machine from the same view.
    func export(patient: String, format: ExportFormat) async throws -> Data?
    /// Follows the live updates, calling `changed` after each change this machine pulled and stored;
    /// returns when it has nothing to follow (the patient's dashboard).
    func follow(changed: @escaping @Sendable () -> Void) async throws
}

/// Whose dashboard it is.
public enum DashboardRole: String, Sendable {
    case doctor, patient
}

/// The exports linked from a patient's page.
public enum ExportFormat: String, Sendable, CaseIterable {
    case csv, fhir

    var contentType: String { self == .csv ? "text/csv; charset=utf-8" : "application/fhir+json; charset=utf-8" }
    var fileExtension: String { self == .csv ? "csv" : "fhir.json" }
}

/// How far a patient's records can be relied on, shown on every row and page, never hidden.
public enum IntegrityState: Sendable, Equatable {
    /// Every category matches the patient's newest signed state commitment.
    case verified
    /// The patient's own records on their own device (signed there; nothing to check them against).
    case ownDevice
    /// Some category has no commitment that matched yet: possibly incomplete or out of date.
    case notConfirmed
    /// What the server sent failed a check: some records are withheld or the set is not the committed one.
    case failure(String)

    var label: String {
        switch self {
        case .verified: "verified"
        case .ownDevice: "on this device"
        case .notConfirmed: "not confirmed"
        case .failure: "integrity failure"
        }
    }

    var cssClass: String {
        switch self {
        case .verified, .ownDevice: "ok"
        case .notConfirmed: "warn"
        case .failure: "bad"
        }
    }

    /// What the label leaves out: the failure's message, or why "not confirmed".
    var detail: String {
        switch self {
        case .verified: "matches the patient's newest signed state"
        case .ownDevice: "the records this device holds; 'carevault-patient sync' brings in other devices' changes"
        case .notConfirmed: "no signed state of the patient's matched yet: may be incomplete or out of date"
        case let .failure(message): message
        }
    }
}

/// Everything a page shows of one patient, already decrypted and verified on this machine.
public struct PatientSheet: Sendable {
    public var username: String
    public var categories: [String]
    public var activities: [Activity]
    public var outcomes: [Outcome]
    /// When the server last saw a change (the triage list's "last change"), Unix ms.
    public var lastChange: UnixMillis?
    /// The oldest "as of" over the categories: the view is complete and current as of then.
    public var asOf: UnixMillis?
    public var integrity: IntegrityState
    /// Categories approved whose keys have not reached this device yet.
    public var awaitingKeys: [String] = []
    /// The patient's dashboard only: its shares, and its verified access log.
    public var shares: [SharedDoctor]? = nil
    public var accessLog: VerifiedAccessLog? = nil
    /// The patient's dashboard only: who the ids in the access log are (user id to username).
    public var names: [String: String] = [:]

    public init(
        username: String,
        categories: [String],
        activities: [Activity],
        outcomes: [Outcome],
        lastChange: UnixMillis?,
        asOf: UnixMillis?,
        integrity: IntegrityState
    ) {
        self.username = username
        self.categories = categories
        self.activities = activities
        self.outcomes = outcomes
        self.lastChange = lastChange
        self.asOf = asOf
        self.integrity = integrity
    }

    /// A sheet for a patient whose view could not be read: the row stays in the list, with why.
    public static func unreadable(username: String, categories: [String], lastChange: UnixMillis?, problem: String) -> PatientSheet {
        PatientSheet(
            username: username,
            categories: categories,
            activities: [],
            outcomes: [],
            lastChange: lastChange,
            asOf: nil,
            integrity: .failure(problem)
        )
    }
}
