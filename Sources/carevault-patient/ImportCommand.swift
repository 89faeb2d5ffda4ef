import ArgumentParser
import Foundation
import VaultCLI
import VaultClient
import VaultCore

/// `import FILE`: many activities and outcomes in one local transaction and one sync, so a whole plan or a
/// device's history needs one process, not thousands. Everything is checked before anything is written.
struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Add or update activities and record outcomes from a JSON file, all at once.",
        discussion: """
            The file holds {"activities": [...], "outcomes": [...]} with the payload's field names (README.md, "Importing").
            An activity whose id exists is replaced; an outcome's values are added to its occurrence.
            One bad item writes nothing and names the item, e.g. outcomes[12].
            Example: carevault-patient import plan.json
            """
    )
    @Argument(help: ArgumentHelp("The JSON file (- for standard input).", valueName: "file")) var file: String
    @OptionGroup var change: ChangeOptions

    func run() async throws {
        let text = try CareInput.read(file, what: "the import file", passwordStdin: change.options.passwordStdin)
        let items = try ImportFile(Data(text.utf8))
        let vault = try await change.vault()
        let now = Date(unixMillis: Date().unixMillis)
        var activities: [String: Activity] = [:]
        var plan: [Activity] = []
        for (i, item) in items.activities.enumerated() {
            plan.append(
                try await ImportFile.checked("activities[\(i)]") {
                    let a = try item.activity(at: now)
                    let id = Output.printable(a.id)
                    guard activities[a.id] == nil else { throw CLIError.usage("the id '\(id)' appears twice in the file") }
                    if let was = try await vault.category(ofActivity: a.id), was != a.category {
                        throw CLIError.usage("activity '\(id)' was in category '\(was)'; choose another id")
                    }
                    activities[a.id] = a
                    return a
                }
            )
        }
        var outcomes: [Outcome] = []
        for (i, item) in items.outcomes.enumerated() {
            outcomes.append(
                try await ImportFile.checked("outcomes[\(i)]") {
                    let o = try item.outcome(at: now)
                    if activities[o.activityID] == nil, try await vault.activity(id: o.activityID) == nil {
                        throw CLIError.usage("no activity '\(Output.printable(o.activityID))' in the file or on this device")
                    }
                    return o
                }
            )
        }
        let added = try await vault.importCare(activities: plan, outcomes: outcomes)
        try await change.sync(vault)
        if change.json {
            try Output.json(["activities": plan.count, "added": added, "outcomes": outcomes.count])
        } else {
            Output.line("imported \(plan.count) activities (\(added) new) and \(outcomes.count) outcomes")
        }
    }
}

/// The import file: `{"activities": [...], "outcomes": [...]}`, either list optional. Items are decoded one
/// by one so an error can name its item; dates are ISO 8601 text (as `--json` prints them) or Unix
/// milliseconds (as the payload holds them).
struct ImportFile {
    var activities: [ImportedActivity] = []
    var outcomes: [ImportedOutcome] = []

    init(_ data: Data) throws {
        guard let top = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw CLIError.usage("the import file is not a JSON object", hint: "see README.md, \"Importing\"")
        }
        if let unknown = top.keys.first(where: { $0 != "activities" && $0 != "outcomes" }) {
            throw CLIError.usage("the import file has an unknown field '\(Output.printable(unknown))'", hint: "use activities and outcomes")
        }
        activities = try Self.items(top["activities"], "activities")
        outcomes = try Self.items(top["outcomes"], "outcomes")
    }

    static func items<T: Decodable>(_ value: Any?, _ name: String) throws -> [T] {
        guard let value else { return [] }
        guard let list = value as? [Any] else { throw CLIError.usage("'\(name)' in the import file is not a list") }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom(date)
        return try list.enumerated().map { i, item in
            do {
                guard JSONSerialization.isValidJSONObject(item) else { throw CLIError.usage("it is not a JSON object") }
                return try decoder.decode(T.self, from: try JSONSerialization.data(withJSONObject: item))
            } catch let e as DecodingError {
                throw CLIError.usage("\(name)[\(i)]: \(plain(e))")
            } catch let e as CLIError {
                throw CLIError.usage("\(name)[\(i)]: \(e.message)")
            }
        }
    }

    /// Runs the checks of one item, prefixing any refusal with the item's name, e.g. `outcomes[3]: `.
    static func checked<T>(_ item: String, _ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch let e as CareModelError {
            throw CLIError.usage("\(item): \(e.description)")
        } catch let e as CLIError {
            throw CLIError.usage("\(item): \(e.message)")
        }
    }

    static func date(_ decoder: any Decoder) throws -> Date {
        let c = try decoder.singleValueContainer()
        if let ms = try? c.decode(Int64.self) { return Date(unixMillis: ms) }
        let text = try c.decode(String.self)
        let iso = ISO8601DateFormatter()
        if let d = iso.date(from: text) { return d }
        iso.formatOptions.insert(.withFractionalSeconds)
        if let d = iso.date(from: text) { return Date(unixMillis: d.unixMillis) }
        throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a date: use ISO 8601 such as 2026-11-20T08:00:00Z, or milliseconds")
    }

    /// A decoding error in plain words: which field, and what is wrong with it.
    static func plain(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            let text = keys.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return Output.printable(text.hasPrefix(".") ? String(text.dropFirst()) : text)
        }
        switch error {
        case let .keyNotFound(key, context): return "the field '\(path(context.codingPath + [key]))' is missing"
        case let .valueNotFound(_, context): return "the field '\(path(context.codingPath))' is null"
        case let .typeMismatch(_, context): return "the field '\(path(context.codingPath))' has the wrong type"
        case let .dataCorrupted(context):
            let field = context.codingPath.isEmpty ? "" : "the field '\(path(context.codingPath))': "
            return field + Output.printable(context.debugDescription)
        @unknown default: return "it cannot be read"
        }
    }
}

/// A value of an import item: `{"value": {"type": "number", "number": 4200}, "units": "steps"}`.
struct ImportedValue: Decodable {
    var value: OutcomeValue.Value
    var units: String?
    var kind: String?

    func outcomeValue(at date: Date, kind defaultKind: String? = nil) throws(CareModelError) -> OutcomeValue {
        let v = OutcomeValue(value: value, units: units, kind: kind ?? defaultKind, createdAt: date)
        try v.validate()
        return v
    }
}

/// An activity of the import file: the payload's fields, without the ones this device sets itself.
struct ImportedActivity: Decodable {
    var id: String
    var title: String
    var instructions: String?
    var category: String
    var schedule: Schedule
    var targetValues: [ImportedValue]?
    var carePlanID: String?
    var userInfo: [String: String]?

    func activity(at date: Date) throws(CareModelError) -> Activity {
        try Activity(
            id: id,
            title: title,
            instructions: instructions,
            category: category,
            schedule: schedule,
            targetValues: try (targetValues ?? []).map { v throws(CareModelError) in try v.outcomeValue(at: date, kind: "target") },
            carePlanID: carePlanID,
            userInfo: userInfo ?? [:],
            createdAt: date
        )
    }
}

/// An outcome of the import file: the values to add to one occurrence of an activity, and a note.
struct ImportedOutcome: Decodable {
    var activityID: String
    var occurrence: Int
    var values: [ImportedValue]?
    var note: String?

    func outcome(at date: Date) throws -> Outcome {
        let values = try (values ?? []).map { try $0.outcomeValue(at: date) }
        guard !values.isEmpty || note != nil else { throw CLIError.usage("give at least one value or a note") }
        let o = Outcome(activityID: activityID, occurrence: occurrence, values: values, note: note, createdAt: date)
        try o.validate()
        return o
    }
}
