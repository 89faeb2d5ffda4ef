import VaultCore

/// How far one category of a doctor's view can be trusted, as every output of the view carries it
/// (Docs/design.md §5.3): a screen, a JSON document, a CSV column, a FHIR security label, a watch line,
/// a dashboard row or download.
public enum CategoryIntegrity: String, Sendable, Codable, Comparable {
    /// What was sent matches the patient's newest signed state commitment this device accepted.
    case verified
    /// Shown as of the patient's commitment this device accepted, while the server is behind it (a
    /// restored backup, Docs/design.md §5.2): the patient's own signed state, older than the server's clock.
    case behind
    /// No commitment of the patient's matched what the server sent: every record verified on its own,
    /// but the set may be incomplete or out of date (a server withholding commitments, data from before them).
    case unconfirmed

    /// Ordered from best to worst: a document covering several categories carries the worst.
    public static func < (a: CategoryIntegrity, b: CategoryIntegrity) -> Bool { a.rank < b.rank }
    private var rank: Int {
        switch self {
        case .verified: 0
        case .behind: 1
        case .unconfirmed: 2
        }
    }
}

/// The integrity of a view per category, and of the whole.
public struct ViewIntegrity: Sendable, Equatable {
    /// Per category shown.
    public var categories: [String: CategoryIntegrity]

    public init(categories: [String: CategoryIntegrity]) { self.categories = categories }

    /// The worst state of every category (verified for a view of none).
    public var overall: CategoryIntegrity { categories.values.max() ?? .verified }

    /// The state of one category: unconfirmed for a category not in the view.
    public subscript(category: String) -> CategoryIntegrity { categories[category] ?? .unconfirmed }

    /// The categories in one state, sorted.
    public func categories(_ state: CategoryIntegrity) -> [String] { categories.filter { $0.value == state }.map(\.key).sorted() }
}

extension PatientView {
    /// Each category's state: unconfirmed when no accepted commitment matched (`unconfirmed`), behind while
    /// the view stands on the accepted state of a server behind it, verified otherwise. Categories awaiting
    /// their keys show no record and carry the state of what their commitment vouched for.
    public var integrity: ViewIntegrity {
        let notConfirmed = Set(unconfirmed)
        let standing = Set(behind)
        var states: [String: CategoryIntegrity] = [:]
        for category in categories {
            states[category] = notConfirmed.contains(category) ? .unconfirmed : (standing.contains(category) ? .behind : .verified)
        }
        return ViewIntegrity(categories: states)
    }

    /// The categories whose records would leave the tool unconfirmed: not confirmed (records held aside
    /// included), and neither merely waiting for their keys nor kept apart as contradicting the commitment
    /// (neither shows a record). `adherence` and `export` need `--allow-unconfirmed` for them.
    public var unconfirmedData: [String] {
        let nothingShown = Set(awaitingKeys).union(unverifiedCategories)
        return unconfirmed.filter { !nothingShown.contains($0) }
    }
}
