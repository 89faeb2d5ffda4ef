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
        @Option(help: "First day (YYYY-MM-DD; default today).") var start: String?
        @Option(help: "Last day, inclusive (YYYY-MM-DD).") var end: String?
        @Option(help: "Time zone of the schedule (default this machine's, e.g. Europe/Berlin).") var timezone: String?
        @Option(help: "A target value, e.g. '10000 steps' (repeatable).") var target: [String] = []

        func build(default spec: String) throws -> Schedule {
            guard let tz = timezone.map({ TimeZone(identifier: $0) }) ?? TimeZone.current else {
                throw CLIError.usage("unknown time zone '\(timezone!)'", hint: "use an IANA name such as Europe/Berlin")
            }
            let first = try CareInput.day(start ?? "today", timeZone: tz)
            var last: Date?
            if let end { last = try CareInput.day(end, timeZone: tz).addingTimeInterval(86_400 - 1) }
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
        @Option(help: "What to do.") var title: String
        @Option(help: "The tresor category, e.g. interventions or assessments.") var category: String
        @Option(help: "How to do it.") var instructions: String?
        @OptionGroup var when: ScheduleOptions
        @OptionGroup var change: ChangeOptions

        func run() async throws {
            let vault = try change.vault()
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
            } catch let e as CareModelError { throw CLIError.usage("invalid activity: \(e)") }
            try await vault.addActivity(activity)
            try await change.sync(vault)
            if change.json {
                try Output.json(activity)
            } else {
                print("added \(id): \(title) (\(category), \(CareInput.describe(activity.schedule)))")
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
        @Option(help: "New title.") var title: String?
        @Option(help: "New instructions.") var instructions: String?
        @OptionGroup var when: ScheduleOptions
        @OptionGroup var change: ChangeOptions

        func run() async throws {
            let vault = try change.vault()
            guard var a = try await vault.activity(id: id) else { throw ClientError.notFound("no activity '\(id)'") }
            if let title { a.title = title }
            if let instructions { a.instructions = instructions }
            if when.schedule != nil { a.schedule = try when.build(default: "daily@08:00") }
            if !when.target.isEmpty { a.targetValues = when.target.map { CareInput.target($0, at: Date(unixMillis: Date().unixMillis)) } }
            try await vault.updateActivity(a)
            try await change.sync(vault)
            if change.json { try Output.json(a) } else { print("updated \(id)") }
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
            let vault = try change.vault()
            try await vault.removeActivity(id: id)
            try await change.sync(vault)
            if change.json { try Output.json(["removed": id]) } else { print("removed \(id)") }
        }
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
        @Option(help: "The day (YYYY-MM-DD, today, yesterday).") var date: String?
        @Option(help: "The occurrence index (overrides --date).") var occurrence: Int?
        @Option(help: "The value: a number, yes/no, or text.") var value: String
        @Option(help: "Units, e.g. steps or mg.") var units: String?
        @Option(help: "A note.") var note: String?
        @OptionGroup var change: ChangeOptions

        func validate() throws {
            if occurrence != nil && date != nil { throw ValidationError("give --date or --occurrence, not both") }
            if let occurrence, occurrence < 0 { throw ValidationError("--occurrence must be 0 or more") }
        }

        func run() async throws {
            let vault = try change.vault()
            guard let a = try await vault.activity(id: activity) else { throw ClientError.notFound("no activity '\(activity)'") }
            let index: Int
            if let occurrence {
                index = occurrence
            } else {
                let tz = TimeZone(identifier: a.schedule.elements.first?.timeZoneIdentifier ?? "") ?? .current
                let day = try CareInput.day(date ?? "today", timeZone: tz)
                guard let event = try a.schedule.events(from: day, to: day.addingTimeInterval(86_400)).first else {
                    throw CLIError.usage(
                        "'\(activity)' is not scheduled on \(Output.date(day, time: false))",
                        hint: "pass --occurrence N, or a day it is scheduled"
                    )
                }
                index = event.occurrence
            }
            let v = OutcomeValue(value: CareInput.value(value), units: units, createdAt: Date(unixMillis: Date().unixMillis))
            let outcome = try await vault.recordOutcome(activityID: activity, occurrence: index, value: v, note: note)
            try await change.sync(vault)
            if change.json { try Output.json(outcome) } else { print("recorded \(CareInput.text(v)) for \(activity), occurrence \(index)") }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List outcomes.",
            discussion: "Example: carevault-patient outcome list --activity walk --from 2026-11-01"
        )
        @Option(help: "Only this activity.") var activity: String?
        @Option(help: "From this day (YYYY-MM-DD).") var from: String?
        @Option(help: "Up to this day, inclusive.") var to: String?
        @OptionGroup var options: GlobalOptions
        func run() async throws {
            let vault = try openVault(options)
            let outcomes = try await vault.outcomes(
                activityID: activity,
                from: try from.map { try CareInput.day($0) },
                to: try to.map { try CareInput.day($0).addingTimeInterval(86_400) }
            )
            try await Output.show(outcomes, json: options.json, headers: Output.outcomeHeaders, empty: "no outcomes yet") {
                Output.outcomeRows(outcomes, activities: try await vault.activities().byID)
            }
        }
    }
}
