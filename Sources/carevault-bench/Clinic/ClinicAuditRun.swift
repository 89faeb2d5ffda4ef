import ClinicAudit
import Foundation
import NIOConcurrencyHelpers
import VaultAPI
import VaultClient
import VaultCore

/// The end of the clinic run: every device's unsent records sent, then the clinic audited against the
/// database underneath and against every doctor's verified view.
struct ClinicFinalAudit {
    let build: ClinicBuild
    let instances: ClinicInstances

    struct Outcome: Sendable {
        var stored = ClinicAudit.Result()
        var acknowledged = 0
        var unsent = 0
        var pairs = 0
        var viewMismatches = 0
        var viewExamples: [String] = []
        var unsharedChecked = 0
        var unsharedReadable = 0
    }

    /// Syncs every patient with records still unsent (a sync that failed during the run), a few tries each.
    func drain() async -> Int {
        let unsent = NIOLockedValueBox(0)
        let patients = build.patients.withLockedValue { $0 }.filter { p in p.state.withLockedValue { !$0.pending.isEmpty } }
        for p in patients {
            for attempt in 1...5 {
                do {
                    let summary = try await p.vault.sync()
                    if summary.rejected.isEmpty {
                        p.state.withLockedValue { s in
                            s.acked += s.pending
                            s.pending = []
                        }
                        break
                    }
                } catch {
                    if attempt == 5 { Progress.say("clinic: \(p.name) could not send its last records: \(error)") }
                    try? await Task.sleep(for: .seconds(1))
                }
            }
            unsent.withLockedValue { $0 += p.state.withLockedValue { $0.pending.count } }
        }
        return unsent.withLockedValue { $0 }
    }

    func run() async throws -> Outcome {
        var out = Outcome()
        out.unsent = await drain()
        let patients = build.patients.withLockedValue { $0 }
        let acknowledged = patients.flatMap { p in p.state.withLockedValue { $0.acked }.map { ClinicAudit.Acknowledged(owner: p.id, recordID: $0) } }
        out.acknowledged = acknowledged.count
        let stored = try await ClinicDatabase.storedRecords(instances.database)
        out.stored = ClinicAudit.compare(acknowledged: acknowledged, stored: stored, owners: Set(patients.map(\.id)))
        Progress.say(
            "clinic: audit of \(acknowledged.count) acknowledged records against \(stored.count) stored: lost \(out.stored.lost), "
                + "duplicated \(out.stored.duplicated), unexpected \(out.stored.unexpected)"
        )
        for e in out.stored.examples { Progress.say("clinic:   \(e)") }
        try await views(&out, patients)
        try await unshared(&out, patients)
        return out
    }

    /// Every doctor's view of every patient who shares with them must equal the patient's own records in
    /// the categories shared with that doctor, verified against the patient's commitment (complete).
    private func views(_ out: inout Outcome, _ patients: [ClinicPatient]) async throws {
        let result = NIOLockedValueBox((pairs: 0, mismatches: 0, examples: [String]()))
        try await forEach(build.doctors, concurrency: 2) { d in
            for i in d.patients.withLockedValue({ $0 }).sorted() {
                let p = patients[i]
                let categories = Set(p.state.withLockedValue { $0.shares }.filter { $0.doctor == d.index }.map(\.category))
                let want = try await p.items(categories: categories)
                var problem: String?
                do {
                    let view = try await d.reader.view(patient: p.name)
                    let difference = ClinicViewAudit.compare(patient: want, doctor: ClinicDoctor.items(view))
                    if !view.complete || !view.quarantined.isEmpty {
                        problem = "not verified: \(view.completenessMessage ?? view.quarantineMessage ?? "")"
                    } else if Set(view.categories) != categories {
                        problem = "categories \(view.categories.sorted()) but shared \(categories.sorted())"
                    } else if !difference.matches {
                        problem =
                            "\(difference.missing.count) missing (e.g. \(difference.missing.first?.description ?? "-")), \(difference.extra.count) extra"
                    }
                } catch {
                    problem = "view failed: \(error)"
                }
                result.withLockedValue { r in
                    r.pairs += 1
                    if let problem {
                        r.mismatches += 1
                        if r.examples.count < 10 { r.examples.append("\(d.name) / \(p.name): \(problem)") }
                    }
                }
            }
        }
        let r = result.withLockedValue { $0 }
        (out.pairs, out.viewMismatches, out.viewExamples) = (r.pairs, r.mismatches, r.examples)
        Progress.say("clinic: \(r.pairs) doctor/patient views checked against the patients' own records: \(r.mismatches) differ")
        for e in r.examples { Progress.say("clinic:   \(e)") }
    }

    /// Each doctor asks the server, with its own session, for a category of one of its patients that is
    /// not shared with it: the answer must be a refusal.
    private func unshared(_ out: inout Outcome, _ patients: [ClinicPatient]) async throws {
        for d in build.doctors {
            guard let token = d.reader.account.session?.token else { continue }
            let candidates = d.patients.withLockedValue { $0 }.sorted().lazy.compactMap { i -> (ClinicPatient, String)? in
                let p = patients[i]
                let shared = Set(p.state.withLockedValue { $0.shares }.filter { $0.doctor == d.index }.map(\.category))
                return ClinicPlan.categories.first { !shared.contains($0) }.map { (p, $0) }
            }
            guard let (p, category) = candidates.first, let patientToken = p.vault.account.session?.token else { continue }
            let tresors = try await Transport(baseURL: build.urls[p.instance]).send(TresorEndpoints.list, auth: .session(patientToken))
            guard let tresor = tresors.tresors.first(where: { $0.category == category }) else { continue }
            let status = try await withRawHTTP(build.urls[d.instance], connections: 1) { raw in
                try await raw.send(.GET, "\(Routes.records)?owner=\(p.id.uuidString)&tresor=\(tresor.tresorID.uuidString)&since=0", token: token)
                    .status
            }
            out.unsharedChecked += 1
            if status == 200 {
                out.unsharedReadable += 1
                Progress.say("clinic: error: \(d.name) read \(p.name)'s \(category), which is not shared with them")
            }
        }
        Progress.say("clinic: \(out.unsharedChecked) doctors asked for a category not shared with them: \(out.unsharedReadable) were answered")
    }
}
