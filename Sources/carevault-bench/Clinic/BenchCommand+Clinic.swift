import ArgumentParser
import Foundation

extension BenchCommand {
    /// `--clinic`: the clinic simulation on each backend asked for; one JSON object (or lines) on stdout.
    /// The top-level `clinic_*` keys are PostgreSQL's run (the production configuration) when it ran,
    /// SQLite's otherwise; each backend's own keys are under `clinic_sqlite` and `clinic_postgres`.
    func executeClinic() async throws {
        var plan = ClinicPlan()
        plan.patients = clinicPatients
        plan.doctors = clinicDoctors
        plan.recordsPerPatient = clinicRecords
        plan.seconds = clinicSeconds
        plan.watchers = min(clinicWatchers, max(0, clinicDoctors - 1))
        plan.probePatients = min(plan.probePatients, clinicPatients)
        plan.probeSamples = clinicProbeSamples
        let rates = clinicRates.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }
        guard rates.count == 2, rates.allSatisfy({ $0 >= 0 && $0.isFinite }) else {
            throw ValidationError("--clinic-rates takes two numbers: syncs,refreshes per second")
        }
        (plan.syncsPerSecond, plan.refreshesPerSecond) = (rates[0], rates[1])
        do { try plan.validate() } catch { throw ValidationError("\(error)") }
        let backends: [BackendKind]
        switch clinicBackend {
        case "both": backends = [.postgres, .sqlite]
        case "sqlite": backends = [.sqlite]
        case "postgres": backends = [.postgres]
        default: throw ValidationError("--clinic-backend must be sqlite, postgres or both")
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-clinic-\(shortID())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let start = Measure.clock.now
        var results: [ClinicResult] = []
        var errors: [String] = []
        for backend in backends {
            if backend == .postgres, ClinicPostgres.binDirectory == nil {
                errors.append("postgres: CAREVAULT_TEST_POSTGRES_BIN is not set (run through Scripts/bench)")
                continue
            }
            do {
                let r = try await ClinicBench(plan: plan, backend: backend, root: root).run()
                for line in r.lines() { Progress.say(line) }
                results.append(r)
            } catch {
                errors.append("\(backend.rawValue): \(error)")
                Progress.say("clinic: error on \(backend.label): \(error)")
            }
        }
        var f: [(String, JSONValue)] = []
        if let main = results.first(where: { $0.backend == .postgres }) ?? results.first { f += main.fields() }
        for r in results { f.append(("clinic_\(r.backend.rawValue)", .object(r.fields()))) }
        f.append(("clinic_run_errors", .array(errors.map { .string($0) })))
        f.append(("elapsed_s", .num(Measure.since(start), 0)))
        f.append(("cores", .int(ProcessInfo.processInfo.activeProcessorCount)))
        print(json ? JSONValue.object(f).render() : results.flatMap { $0.lines() }.joined(separator: "\n"))
        for r in results where !r.intact {
            errors.append("\(r.backend.rawValue): the final audit found the clinic's data not intact (see the verdicts)")
        }
        if !errors.isEmpty {
            for e in errors { Progress.say("clinic: error: \(e)") }
            throw ExitCode(1)
        }
    }
}
