import Foundation
import VaultClient
import VaultCore

/// Builds the CSV export of one patient's shared outcomes: a header, then one row per recorded value
/// with its activity, occurrence and when it was scheduled and recorded (ISO 8601, UTC), and the
/// integrity of its category (Docs/design.md §5.3).
public enum CSVExport {
    /// The header row.
    public static let header = "activity_id,activity_title,category,occurrence,scheduled,value,units,recorded,note,integrity"

    /// The whole file: the header and a row per live value, each line ending in a newline. Each row's last
    /// cell is its category's state in `integrity` (`verified`, `behind`, `unconfirmed`), or `own-device`
    /// for the patient's own records (`integrity` nil).
    public static func document(activities: [Activity], outcomes: [Outcome], integrity: ViewIntegrity? = nil) -> Data {
        var lines = [header]
        let byID = activities.byID
        let iso = ISO8601DateFormatter()
        for o in outcomes {
            for v in o.liveValues {
                let a = byID[o.activityID]
                lines.append(
                    [
                        cell(o.activityID), cell(a?.title ?? ""), cell(a?.category ?? ""), String(o.occurrence),
                        a?.schedule.event(occurrence: o.occurrence).map { iso.string(from: $0.start) } ?? "", cell(text(v.value)),
                        cell(v.units ?? ""), iso.string(from: v.createdAt), cell(o.note ?? ""),
                        Self.integrity(category: a?.category, of: integrity),
                    ].joined(separator: ",")
                )
            }
        }
        return Data((lines.joined(separator: "\n") + "\n").utf8)
    }

    /// A row's integrity cell: its category's state, the worst of the view for an outcome whose activity
    /// is not in the file, `own-device` for the patient's own export.
    static func integrity(category: String?, of view: ViewIntegrity?) -> String {
        guard let view else { return "own-device" }
        return (category.map { view[$0] } ?? view.overall).rawValue
    }

    /// A value as a spreadsheet reads it back: numbers as Swift prints a Double, booleans as true/false.
    static func text(_ value: OutcomeValue.Value) -> String {
        switch value {
        case let .number(n): return String(n)
        case let .boolean(b): return String(b)
        case let .text(t): return t
        }
    }

    /// A CSV cell, quoted, with control and bidirectional characters neutralised (`Output.printable`: a
    /// file is often read with `cat`) and formula prefixes neutralised so a spreadsheet does not execute it.
    public static func cell(_ raw: String) -> String {
        let text = Output.printable(raw)
        let guarded = ["=", "+", "-", "@"].contains(where: { text.hasPrefix($0) }) && Double(text) == nil ? "'" + text : text
        return "\"" + guarded.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
