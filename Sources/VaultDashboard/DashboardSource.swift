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
    func triage() async throws -> Triage
    /// One patient's page; nil when there is no such patient here (404).
    func sheet(patient: String) async throws -> PatientSheet?
    /// An export of one patient's records, built on this machine from the same view; `ExportRefused`
    /// when that view failed its integrity check, as the command-line `export` refuses (exit status 65).
    func export(patient: String, format: ExportFormat) async throws -> Data?
    /// Follows the live updates, calling `changed` after each change this machine pulled and stored;
    /// returns when it has nothing to follow (the patient's dashboard).
    func follow(changed: @escaping @Sendable () -> Void) async throws
}

/// The triage list's sheets, and how many patients the server listed whose share did not verify.
public struct Triage: Sendable {
    public var sheets: [PatientSheet]
    public var unverified: Int

    public init(sheets: [PatientSheet], unverified: Int) {
        self.sheets = sheets
        self.unverified = unverified
    }
}

/// An export not given: the view it would be built from failed its integrity check (answered 502).
public struct ExportRefused: Error, Sendable {
    public var message: String
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
    /// Every category matches a signed state of the patient's that this device accepted, but the server is
    /// behind it (a restored backup, Docs/design.md §5.2): shown as of then, the notes say how old.
    case behind(String)
    /// What verified is shown, but not everything shared: records this device holds no key for, or
    /// categories whose keys have not arrived (the message says which).
    case partial(String)
    /// The view could not be read at all for a reason other than a failed check (the server refused the
    /// share, or answered badly): nothing of this patient is shown.
    case unreadable(String)
    /// What the server sent failed a check: some records are withheld or the set is not the committed one.
    case failure(String)

    var label: String {
        switch self {
        case .verified: "verified"
        case .ownDevice: "on this device"
        case .notConfirmed: "not confirmed"
        case .behind: "server behind"
        case .partial: "partly readable"
        case .unreadable: "unreadable"
        case .failure: "integrity failure"
        }
    }

    var cssClass: String {
        switch self {
        case .verified, .ownDevice: "ok"
        case .notConfirmed, .partial, .behind: "warn"
        case .failure, .unreadable: "bad"
        }
    }

    /// What the label leaves out: the failure's message, or why "not confirmed".
    /// What a download of the view carries (`meta.tag`, the CSV's integrity column), said beside its link;
    /// nil when every row is verified (or the patient's own).
    var downloadNote: String? {
        switch self {
        case .verified, .ownDevice, .failure, .unreadable: nil
        case .notConfirmed: "Downloads are marked unconfirmed: no signed state of the patient's confirmed them."
        case .partial: "Downloads hold only what this device can read; rows not confirmed are marked unconfirmed."
        case .behind: "Downloads are marked behind: the patient's signed state as of the time above, not newer."
        }
    }

    var detail: String {
        switch self {
        case .verified: "matches the patient's newest signed state"
        case .ownDevice: "the records this device holds; 'carevault-patient sync' brings in other devices' changes"
        case .notConfirmed: "no signed state of the patient's matched yet: may be incomplete or out of date"
        case let .partial(message), let .unreadable(message), let .behind(message): message
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
    /// Categories shown as of the state this device accepted while the server is behind it, one note each
    /// (`PatientView.serverBehind`).
    public var serverBehind: [String] = []
    /// The patient's dashboard only: its shares, and its verified access log.
    public var shares: [SharedDoctor]? = nil
    public var accessLog: VerifiedAccessLog? = nil
    /// The patient's dashboard only: who the ids in the access log are (user id to username).
    public var names: [String: String] = [:]
    /// The patient's dashboard only: why the access log could not be read or verified, if it could not.
    public var accessLogProblem: String? = nil

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
