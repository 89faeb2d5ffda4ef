import ArgumentParser
import Foundation
import VaultCLI
import VaultClient
import VaultCore

struct ActivityCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activity",
        abstract: "Add, list, update or remove care-plan activities.",
        subcommands: [Add.self, List.self, Update.self, Remove.self]
    )

    struct ScheduleOptions: ParsableArguments {
        @Option(help: "When: daily@08:00,20:00 · weekly:mon,thu@09:00 · every:3d@08:00 · every:6h · allday (join with ';').") var schedule: String?
        @Option(help: ArgumentHelp("First day (YYYY-MM-DD, today, tomorrow; default today).", valueName: "day")) var start: Day?
        @Option(help: ArgumentHelp("Last day, inclusive (YYYY-MM-DD).", valueName: "day")) var end: Day?
        @Option(help: "Time zone of the schedule (default this machine's, e.g. Europe/Berlin).") var timezone: String?
        @Option(help: "A target value, e.g. '10000 steps' (repeatable).") var target: [String] = []

        func build(default spec: String) throws -> Schedule {
            guard let tz = timezone.map({ TimeZone(identifier: $0) }) ?? TimeZone.current else {
                throw CLIError.usage("unknown time zone '\(Output.printable(timezone!))'", hint: "use an IANA name such as Europe/Berlin")
            }
            let first = (start ?? .today).start(in: tz)
            var last: Date?
            if let end { last = end.start(in: tz).addingTimeInterval(86_400 - 1) }
            if let last, last < first { throw CLIError.usage("--end is before --start") }
            let now = Date(unixMillis: Date().unixMillis)
            return try CareInput.schedule(
                schedule ?? spec,
                start: first,
                end: last,
                timeZone: tz,
                targets: target.map { CareInput.target($0, at: now) }
            )
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add an activity.",
            discussion: """
                Example: carevault-patient activity add --id walk --title "Walk 30 minutes" --category interventions --schedule daily@08:00 --target "3000 steps"
                """
        )
        @Option(help: "A stable id, e.g. walk.") var id: String
        @OptionGroup var text: TextOptions
        @Option(help: "The tresor category, e.g. interventions or assessments.") var category: String
        @OptionGroup var when: ScheduleOptions
        @OptionGroup var change: ChangeOptions

        func run() async throws {
            guard let title = try text.title(change.options) else { throw CLIError.usage("give --title or --title-file") }
            let instructions = try text.instructions(change.options)
            let vault = try await change.vault()
            let now = Date(unixMillis: Date().unixMillis)
            let activity: Activity
            do {
                activity = try Activity(
                    id: id,
                    title: title,
                    instructions: instructions,
                    category: category,
                    schedule: try when.build(default: "daily@08:00"),
                    targetValues: when.target.map { CareInput.target($0, at: now) },
                    createdAt: now
                )
            } catch let e as CareModelError { throw CLIError.usage("invalid activity: \(e.description)") }
            try await vault.addActivity(activity)
            try await change.sync(vault)
            if change.json {
                try Output.json(activity)
            } else {
                Output.line("added \(id): \(title) (\(category), \(CareInput.describe(activity.schedule)))")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List activities.",
            discussion: "Example: carevault-patient activity list --category interventions"
        )
        @Option(help: "Only this category.") var category: String?
        @OptionGroup var options: GlobalOptions
        func run() async throws {
            let list = try await openVault(options).activities(category: category)
            try await Output.show(list, json: options.json, headers: ["ID", "TITLE", "CATEGORY", "SCHEDULE", "TARGET"], empty: "no activities yet") {
                list.map { a in
                    [a.id, a.title, a.category, CareInput.describe(a.schedule), a.targetValues.map(CareInput.text).joined(separator: ", ")]
                }
            }
        }
    }

    struct Update: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change an activity's title, instructions or schedule.",
            discussion: "Example: carevault-patient activity update --id walk --title \"Walk 45 minutes\""
        )
        @Option(help: "The activity's id.") var id: String
        @OptionGroup var text: TextOptions
        @OptionGroup var when: ScheduleOptions
        @OptionGroup var change: ChangeOptions

        func run() async throws {
            let title = try text.title(change.options)
            let instructions = try text.instructions(change.options)
            let vault = try await change.vault()
            guard var a = try await vault.activity(id: id) else { throw noActivity(id) }
            if let title { a.title = title }
            if let instructions { a.instructions = instructions }
            if when.schedule != nil { a.schedule = try when.build(default: "daily@08:00") }
            if !when.target.isEmpty { a.targetValues = when.target.map { CareInput.target($0, at: Date(unixMillis: Date().unixMillis)) } }
            try await vault.updateActivity(a)
            try await change.sync(vault)
            if change.json { try Output.json(a) } else { Output.line("updated \(id)") }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove an activity.",
            discussion: "Example: carevault-patient activity remove --id walk"
        )
        @Option(help: "The activity's id.") var id: String
        @OptionGroup var change: ChangeOptions
        func run() async throws {
            let vault = try await change.vault()
            try await vault.removeActivity(id: id)
            try await change.sync(vault)
            if change.json { try Output.json(["removed": id]) } else { Output.line("removed \(id)") }
        }
    }
}

/// The "no such activity" error, with the id neutralised.
func noActivity(_ id: String) -> ClientError { ClientError.notFound("no activity '\(Output.printable(id))'") }

/// An activity's title and instructions, each given directly or read from a file for long text.
struct TextOptions: ParsableArguments {
    @Option(help: "What to do.") var title: String?
    @Option(name: .customLong("title-file"), help: ArgumentHelp("Read the title from this file (- for standard input).", valueName: "file"))
    var titleFile: String?
    @Option(help: "How to do it.") var instructions: String?
    @Option(
        name: .customLong("instructions-file"),
        help: ArgumentHelp("Read the instructions from this file (- for standard input).", valueName: "file")
    )
    var instructionsFile: String?

    func validate() throws {
        if titleFile == "-" && instructionsFile == "-" { throw ValidationError("only one of the files can be standard input") }
    }

    func title(_ options: GlobalOptions) throws -> String? {
        try CareInput.text(title, file: titleFile, option: "title", passwordStdin: options.passwordStdin)
    }

    func instructions(_ options: GlobalOptions) throws -> String? {
        try CareInput.text(instructions, file: instructionsFile, option: "instructions", passwordStdin: options.passwordStdin)
    }
}

struct OutcomeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "outcome",
        abstract: "Record and list outcomes.",
        subcommands: [Record.self, List.self]
    )

    struct Record: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Record a value for one occurrence of an activity.",
            discussion: """
                Without --occurrence, the first occurrence on --date (default today) is used.
                Example: carevault-patient outcome record --activity walk --date 2026-11-20 --value 4200 --units steps
                """
        )
        @Option(help: "The activity's id.") var activity: String
        @Option(help: ArgumentHelp("The day (YYYY-MM-DD, today, yesterday).", valueName: "day")) var date: Day?
        @Option(help: "The occurrence index (overrides --date).") var occurrence: Int?
        @Option(help: "The value: a number, yes/no, or text.") var value: String
        @Option(help: "Units, e.g. steps or mg.") var units: String?
        @Option(help: "A note.") var note: String?
        @Option(name: .customLong("note-file"), help: ArgumentHelp("Read the note from this file (- for standard input).", valueName: "file"))
        var noteFile: String?
        @OptionGroup var change: ChangeOptions

        func validate() throws {
            if occurrence != nil && date != nil { throw ValidationError("give --date or --occurrence, not both") }
            if let occurrence, occurrence < 0 { throw ValidationError("--occurrence must be 0 or more") }
            if let occurrence, occurrence > VaultCore.Outcome.maxOccurrence {
                throw ValidationError(CareModelError.occurrenceTooLarge(occurrence).description)
            }
        }

        func run() async throws {
            let note = try CareInput.text(note, file: noteFile, option: "note", passwordStdin: change.options.passwordStdin)
            let vault = try await change.vault()
            guard let a = try await vault.activity(id: activity) else { throw noActivity(activity) }
            let index: Int
            if let occurrence {
                index = occurrence
            } else {
                let tz = TimeZone(identifier: a.schedule.elements.first?.timeZoneIdentifier ?? "") ?? .current
                let day = (date ?? .today).start(in: tz)
                guard let event = try a.schedule.events(from: day, to: day.addingTimeInterval(86_400)).first else {
                    throw CLIError.usage(
                        "'\(Output.printable(activity))' is not scheduled on \(Output.date(day, time: false))",
                        hint: "pass --occurrence N, or a day it is scheduled"
                    )
                }
                index = event.occurrence
            }
            let v = OutcomeValue(value: CareInput.value(value), units: units, createdAt: Date(unixMillis: Date().unixMillis))
            let outcome = try await vault.recordOutcome(activityID: activity, occurrence: index, value: v, note: note)
            try await change.sync(vault)
            if change.json {
                try Output.json(outcome)
            } else {
                Output.line("recorded \(CareInput.text(v)) for \(activity), occurrence \(index)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List outcomes.",
            discussion: "Example: carevault-patient outcome list --activity walk --from 2026-11-01"
        )
        @Option(help: "Only this activity.") var activity: String?
        @Option(help: ArgumentHelp("From this day (YYYY-MM-DD).", valueName: "day")) var from: Day?
        @Option(help: ArgumentHelp("Up to this day, inclusive.", valueName: "day")) var to: Day?
        @OptionGroup var options: GlobalOptions
        func run() async throws {
            let range = try CareInput.range(from: from, to: to)
            let vault = try await openVault(options)
            let outcomes = try await vault.outcomes(activityID: activity, from: range.from, to: range.to)
            try await Output.show(outcomes, json: options.json, headers: Output.outcomeHeaders, empty: "no outcomes yet") {
                Output.outcomeRows(outcomes, activities: try await vault.activities().byID)
            }
        }
    }
}
