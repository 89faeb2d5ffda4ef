import ArgumentParser
import Foundation
import VaultAPI

/// `carevault-bench`: measures what CareVault exists for, each figure beside its floor measured in the
/// same run (Docs/benchmarks.md). Scripts/bench builds it in release mode and runs it beside a throwaway
/// PostgreSQL cluster.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "carevault-bench",
        abstract: "Benchmarks CareVault against its floors: envelope crypto, push, pull, incremental sync, load, login.",
        discussion: """
            PostgreSQL figures need CAREVAULT_TEST_POSTGRES_URL (Scripts/bench sets it through Scripts/with-postgres); \
            without it they are null. Progress goes to stderr; stdout carries the table, or with --json only the JSON object.
            """,
        version: CareVaultVersion.current
    )

    @Flag(help: "Run the reduced version (under two minutes after the build).")
    var quick = false

    @Flag(help: "Print one JSON object on stdout instead of the table.")
    var json = false

    @Option(help: "Comma-separated parts to run: crypto, push, incremental, load, login, memory, live (default: all).")
    var only: String?

    @Flag(help: "Run the clinic simulation instead (long: builds a clinic of --clinic-patients patients and runs its workload).")
    var clinic = false

    @Option(help: "Clinic: patients (default 1000).")
    var clinicPatients = 1_000

    @Option(help: "Clinic: doctors (default 50).")
    var clinicDoctors = 50

    @Option(help: "Clinic: records per patient (default 1000).")
    var clinicRecords = 1_000

    @Option(help: "Clinic: seconds of mixed workload (default 240).")
    var clinicSeconds = 240.0

    @Option(help: "Clinic: doctors who watch live (default 10).")
    var clinicWatchers = 10

    @Option(help: "Clinic: syncs and refreshes timed by each growth probe (default 101; more for a steadier median, or to profile it).")
    var clinicProbeSamples = 101

    @Option(help: "Clinic: open-loop syncs and refreshes per second (default 8 and 4).")
    var clinicRates = "8,4"

    @Option(help: "Clinic: sqlite, postgres or both (default both).")
    var clinicBackend = "both"

    func run() async throws { try await execute() }

    /// The whole run (main.swift calls this directly; see there).
    func execute() async throws {
        if clinic { return try await executeClinic() }
        let sections: Set<BenchSection>
        if let only {
            var chosen = Set<BenchSection>()
            for name in only.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !name.isEmpty {
                guard let s = BenchSection(rawValue: name) else {
                    throw ValidationError("unknown part '\(name)'; choose from \(BenchSection.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                chosen.insert(s)
            }
            sections = chosen
        } else {
            sections = Set(BenchSection.allCases)
        }

        let plan = BenchPlan(quick: quick)
        var report = BenchReport(plan: plan)
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-bench-\(shortID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let start = Measure.clock.now
        Progress.say(
            "carevault-bench: \(quick ? "quick" : "full") run on \(ProcessInfo.processInfo.activeProcessorCount) cores; work folder \(root.path)"
        )

        if sections.contains(.crypto) {
            Progress.say("1. envelope seal/open against raw libsodium")
            do { report.crypto = try CryptoBench(plan: plan).run() } catch { report.fail("crypto", error) }
            do { report.commitment = try CommitmentBench(plan: plan).run() } catch { report.fail("commitment", error) }
        }

        if sections.contains(.load) {
            Progress.say("5. server under load: \(plan.loadClients.map(String.init).joined(separator: ", ")) clients")
            do { report.load = try await LoadBench(plan: plan, root: root).run() } catch { report.fail("load", error) }
        }

        if sections.contains(.push) {
            Progress.say("2-3. push and pull through the server, against the database floors")
            for backend in BackendKind.allCases {
                if backend == .postgres, BenchDatabase.postgresURL == nil {
                    report.postgresUnavailable = "CAREVAULT_TEST_POSTGRES_URL is not set (Scripts/bench sets it through Scripts/with-postgres)"
                    Progress.say("note: PostgreSQL unavailable: \(report.postgresUnavailable!); postgres figures are null")
                    continue
                }
                for size in RecordSize.allCases {
                    let database: BenchDatabase
                    do {
                        database = try await BenchDatabase.make(backend, root: root)
                    } catch {
                        if backend == .postgres {
                            report.postgresUnavailable = "cannot create a database: \(error)"
                            Progress.say("note: PostgreSQL unavailable: \(error); postgres figures are null")
                            break
                        }
                        report.fail("\(backend.rawValue) \(size.label)", error)
                        continue
                    }
                    do {
                        report.pushPull.append(try await PushPullBench(database: database, size: size, count: plan.pushCount(size), root: root).run())
                    } catch {
                        report.fail("push/pull \(backend.rawValue) \(size.label)", error)
                    }
                    await database.close()
                }
            }
        }

        if sections.contains(.incremental) {
            Progress.say("4. incremental sync: \(plan.incrementalSmall) against \(plan.incrementalLarge) records")
            do {
                let r = try await IncrementalSyncBench(
                    small: plan.incrementalSmall,
                    large: plan.incrementalLarge,
                    reps: plan.incrementalReps,
                    root: root
                ).run()
                report.incrementalSmall = r.small
                report.incrementalLarge = r.large
            } catch {
                report.fail("incremental", error)
            }
        }

        if sections.contains(.memory) {
            Progress.say("7. the doctor's first read of \(plan.doctorMemoryRecords) records: peak memory of carevault-doctor")
            do { report.doctorMemory = try await DoctorMemoryBench(records: plan.doctorMemoryRecords, root: root).run() } catch {
                report.fail("doctor memory", error)
            }
        }

        if sections.contains(.live) {
            Progress.say("8. live updates: a patient's push to a watching doctor's printed line, \(plan.liveReps) changes")
            do { report.live = try await LiveBench(reps: plan.liveReps, idle: plan.liveIdle, root: root).run() } catch { report.fail("live", error) }
        }

        if sections.contains(.login) {
            Progress.say("6. login with Argon2id moderate")
            do { report.login = try await LoginBench(reps: plan.loginReps, root: root).run() } catch { report.fail("login", error) }
        }

        report.elapsedSeconds = Measure.since(start)
        Progress.say("done in \(fmt(report.elapsedSeconds, 1)) s")
        print(json ? report.json().render() : report.table())
        if !report.errors.isEmpty { throw ExitCode(1) }
    }
}
