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
        /// The tresors whose server is behind the state accepted before (Docs/design.md §5.2); each one's
        /// message is among `problems` too, so a reader that does not heal reports it like any other.
        var behind: [ServerBehind] = []
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
            if let behind = ServerBehind(tresorID: id, category: category, shown: c, seen: accepted[id]) {
                verdict.problems.append(behind.message)
                verdict.behind.append(behind)
            } else if let problem = Self.problem(c, seen: accepted[id], copy: copy(id), category: category, checkSet: comparesSet(id, c)) {
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

/// A tresor whose server shows an older state than the reader accepted (Docs/design.md §5.2): a lower
/// commitment sequence, none after one was accepted, or another statement at the accepted sequence (two
/// devices of the patient that each went on from a restored server). As after a restored backup, or a
/// rollback by a hostile server: the reader cannot tell them apart and need not, since it accepts neither
/// as current.
struct ServerBehind: Sendable, Equatable {
    var tresorID: UUID
    var category: String
    /// The sequence the server shows (nil: none).
    var shown: UInt64?
    /// The sequence the reader accepted.
    var seen: UInt64
    /// Whether the reader's copy of the heads is still exactly the set it accepted at `seen` (a doctor's
    /// cache that took nothing from the server since): its last accepted view then stands, as of `seen`.
    var holdsAccepted = false

    /// The server is behind `seen` with `shown`, or nil when it is not.
    init?(tresorID: UUID, category: String, shown: StateCommitment?, seen: StateCommitment?) {
        guard let seen else { return nil }
        if let shown, shown.sequence > seen.sequence || shown == seen { return nil }
        self.tresorID = tresorID
        self.category = category
        self.shown = shown?.sequence
        self.seen = seen.sequence
    }

    /// What a reader reports while it waits for the patient's device to bring the server up to date.
    var message: String {
        let what: String
        switch shown {
        case nil: what = "the server no longer shows the state of \(category) (commitment \(seen) was seen before)"
        case seen?: what = "the server shows another state of \(category) at commitment \(seen) than the one accepted"
        case let s?: what = "the server shows an older state of \(category) (commitment \(s), after \(seen) was seen)"
        }
        return what + ": the server is behind, waiting for the patient's device to bring it up to date"
    }

    /// What a doctor's view reports when it shows the state it accepted at `seen` (`holdsAccepted`: never
    /// for another statement at `seen` itself).
    var standingMessage: String {
        let shows = shown.map { "commitment \($0)" } ?? "no commitment"
        return "the server is behind for \(category) (it shows \(shows)): shown as the patient committed to it at \(seen), "
            + "waiting for the patient's device to bring the server up to date"
    }

    /// What the patient's device tells the patient when it heals the server, re-sending `count` versions.
    /// Another statement signed at the very sequence this device accepted is said outright: two states of the
    /// patient's signed at one sequence mean that another device went on from an older server state (a
    /// restored backup) or that the server showed the devices two histories (Docs/design.md §5.2).
    func healing(_ count: Int) -> String {
        let resending = "re-sending \(count) version\(count == 1 ? "" : "s")"
        if shown == seen {
            return "the server shows another state of \(category) signed at commitment \(seen) than the one this device "
                + "accepted: another of your devices went on from an older server state (as after a restored backup), "
                + "or the server showed your devices two different histories; \(resending)"
        }
        let shows = shown.map { "it shows commitment \($0)" } ?? "it shows no commitment"
        return "the server is behind what this device last saw (\(category): \(shows), this device accepted \(seen)), "
            + "as after a restored backup; \(resending)"
    }
}
