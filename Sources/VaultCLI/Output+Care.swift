import Foundation
import VaultCore

extension Array where Element == Activity {
    /// The activities by id; the first of a repeated id wins.
    public var byID: ActivityIndex { ActivityIndex(self) }
}

/// Activities by id, without a copy of them: positions in the array they came in (a view of 100,000
/// activities would otherwise be held twice while a command prints it).
public struct ActivityIndex {
    private let activities: [Activity]
    private let positions: [String: Int]

    init(_ activities: [Activity]) {
        self.activities = activities
        positions = Dictionary(activities.indices.map { (activities[$0].id, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// The activity with `id` (the first of a repeated id), if any.
    public subscript(id: String) -> Activity? { positions[id].map { activities[$0] } }
}

extension Output {
    /// The columns of an outcome table.
    public static let outcomeHeaders = ["ACTIVITY", "WHEN", "VALUES", "NOTE"]

    /// One row per outcome: when its occurrence was scheduled (or `#N` when its activity is unknown),
    /// its live values and its note.
    public static func outcomeRows(_ outcomes: [Outcome], activities: ActivityIndex) -> [[String]] {
        outcomes.map { o in
            [
                o.activityID, activities[o.activityID]?.schedule.event(occurrence: o.occurrence).map { date($0.start) } ?? "#\(o.occurrence)",
                o.liveValues.map(CareInput.text).joined(separator: ", "), o.note ?? "",
            ]
        }
    }
}
