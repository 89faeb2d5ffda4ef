import Foundation
import VaultCore

/// What both replicas do with the commitments a final pull page showed (Docs/envelope-v1.md §3.4): each is
/// matched to a tresor the pull covers, its signature checked (unless it is the very commitment accepted
/// before), and then one rule (`problem`) decides per tresor against the reader's copy of the server's heads.
enum CommitmentReview {
    /// What a review found: the problems in plain words, and the commitments to accept as the newest.
    struct Verdict {
        var problems: [String] = []
        var accepted: [StateCommitment] = []
    }

    /// Reviews `shown` for the tresors of `tresors` (ids to categories, the tresors the pull covers), given
    /// the newest commitment accepted of each (`accepted`) and the reader's copy of the server's heads of
    /// each (`copy`). `comparesSet(id, shown)` says whether a tresor's set is compared with its commitment
    /// (not while it holds quarantined records, whose failure already stands). A tresor whose commitment
    /// was refused (a bad signature, two shown) is reported once and accepts nothing.
    static func review(
        _ shown: [StateCommitment],
        patient: Certificate,
        tresors: [UUID: String],
        accepted: [UUID: StateCommitment],
        copy: (UUID) -> HeadSet,
        comparesSet: (UUID, StateCommitment?) -> Bool
    ) -> Verdict {
        var verdict = Verdict()
        var byTresor: [UUID: StateCommitment] = [:]
        var refused = Set<UUID>()
        for c in shown {
            guard let category = tresors[c.tresorID] else {
                verdict.problems.append("the server shows a state commitment of a tresor this pull does not cover")
                continue
            }
            guard !refused.contains(c.tresorID) else { continue }
            guard byTresor.removeValue(forKey: c.tresorID) == nil else {
                verdict.problems.append("the server shows two state commitments of \(category)")
                refused.insert(c.tresorID)
                continue
            }
            // The very commitment accepted before (same statement, same signature) was verified then.
            do { if c != accepted[c.tresorID] { try c.verify(patient: patient, tresorID: c.tresorID, category: category) } } catch {
                verdict.problems.append("the state commitment of \(category) does not verify: \(error)")
                refused.insert(c.tresorID)
                continue
            }
            byTresor[c.tresorID] = c
        }
        for (id, category) in tresors.sorted(by: { $0.value < $1.value }) where !refused.contains(id) {
            let c = byTresor[id]
            if let problem = Self.problem(c, seen: accepted[id], copy: copy(id), category: category, checkSet: comparesSet(id, c)) {
                verdict.problems.append(problem)
            } else if let c {
                verdict.accepted.append(c)
            }
        }
        return verdict
    }

    /// The one rule both readers apply to a tresor's newest commitment once a pull is done, after its
    /// signature and tresor checked out: what is wrong with `shown` (nil when the server showed none) given
    /// the newest commitment the reader accepted before (`seen`) and its own copy of the heads; nil when
    /// nothing is. Without `checkSet` (the tresor holds quarantined records) only a rollback or a vanished
    /// commitment counts.
    static func problem(_ shown: StateCommitment?, seen: StateCommitment?, copy: HeadSet, category: String, checkSet: Bool) -> String? {
        guard let c = shown else {
            // Data from before commitments existed is accepted until a first commitment is seen.
            guard let seen else { return nil }
            return "the server no longer shows the state of \(category) (commitment \(seen.sequence) was seen before)"
        }
        if let seen, c.sequence < seen.sequence || (c.sequence == seen.sequence && c != seen) {
            return "the server shows an older state of \(category) (commitment \(c.sequence), after \(seen.sequence) was seen)"
        }
        if checkSet, !c.describes(copy) {
            return "the records of \(category) the server sent are not the set the patient committed to (commitment \(c.sequence))"
        }
        return nil
    }
}
