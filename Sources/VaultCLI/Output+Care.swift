import Foundation
import VaultCore

extension Array where Element == Activity {
    /// The activities by id; the first of a repeated id wins.
    public var byID: [String: Activity] { Dictionary(map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first }) }
}

extension Output {
    /// The columns of an outcome table.
    public static let outcomeHeaders = ["ACTIVITY", "WHEN", "VALUES", "NOTE"]

    /// One row per outcome: when its occurrence was scheduled (or `#N` when its activity is unknown),
    /// its live values and its note.
    public static func outcomeRows(_ outcomes: [Outcome], activities: [String: Activity]) -> [[String]] {
        outcomes.map { o in
            [
                o.activityID, activities[o.activityID]?.schedule.event(occurrence: o.occurrence).map { date($0.start) } ?? "#\(o.occurrence)",
                o.liveValues.map(CareInput.text).joined(separator: ", "), o.note ?? "",
            ]
        }
    }
}
