import Foundation
import VaultCore
import VaultCrypto

/// Pages authenticated by the state commitment (Docs/commitment-pages.md): which records of a final pull
/// page may go without their own signature check. Only the records of the final page are candidates
/// (earlier pages are stored, checked one by one, before any commitment is seen), and only when every
/// received record of the tresor is one of the heads the reader then holds, so a matching digest puts each
/// of them in the set the patient signed.
enum CommitmentPages {
    /// The tresors of `changes` that a commitment of `shown` may authenticate, with that commitment: the
    /// tresor has exactly one commitment shown, every change of the page parsed, and no record appears
    /// twice in the page (an earlier version would not be a head, so the digest would not cover it).
    static func candidates(_ changes: [PulledChange], shown: [StateCommitment]) -> [UUID: StateCommitment] {
        var records = Set<String>()
        for change in changes {
            guard let env = change.envelope, records.insert(env.header.recordID.hex).inserted else { return [:] }
        }
        var byTresor: [UUID: StateCommitment] = [:]
        var twice = Set<UUID>()
        for c in shown where byTresor.updateValue(c, forKey: c.tresorID) != nil { twice.insert(c.tresorID) }
        for id in twice { byTresor[id] = nil }
        return byTresor
    }

    /// True when `shown` authenticates the records of `tresor` (`category`) received in this pull: it
    /// passes every check of §3.4 a commitment gets (signature unless it is the one accepted before, owner,
    /// tresor, category, no rollback of `accepted`), and describes `prospective`, the reader's heads of that
    /// tresor with every record of the page folded in, digest, counts and newest HLC.
    static func vouches(
        _ shown: StateCommitment,
        tresor: UUID,
        category: String,
        patient: Certificate,
        accepted: StateCommitment?,
        prospective: HeadSet
    ) -> Bool {
        let verdict = CommitmentReview.review(
            [shown],
            patient: patient,
            tresors: [tresor: category],
            accepted: accepted.map { [tresor: $0] } ?? [:],
            copy: { _ in prospective },
            comparesSet: { _, _ in true }
        )
        return verdict.problems.isEmpty && verdict.accepted == [shown]
    }
}

extension SharedReplica {
    /// A doctor's checks of a final page: with its `commitments`, the records of the share (those of this
    /// page and those held pending from the pages before it) may go without their signature checks when
    /// the share holds no quarantined record, every record of the page passes the other checks, and the
    /// share shows one commitment; the store then decides, in its transaction, whether that commitment
    /// authenticates the heads they make (`DoctorCache.storeIfVouched`). Otherwise, and when held to the old
    /// path, every record of the page is checked on its own (and those held pending when stored).
    func verify(_ changes: [PulledChange], commitments: [StateCommitment]?) async throws -> SharedPage {
        let signatures = SignatureCheck.current
        let checks = checks(signatures)
        guard !signatures.perRecordOnly, let commitments,
            let shown = CommitmentPages.candidates(changes, shown: commitments)[tresor]
        else { return SharedPage(items: try await checks.run(changes), mode: .checked) }
        let unsigned = SharedPage(items: try await checks.run(changes, deferringSignatures: true), mode: .candidate(shown))
        guard unsigned.entries.count == unsigned.items.count, try await quarantined().isEmpty else {
            // A record of the page failed another check: each is checked on its own, as the old path does.
            return SharedPage(items: try await checks.run(changes), mode: .checked)
        }
        return await unsigned.summed()
    }
}

extension ServerStates {
    /// The tresors of `changes` (a final page) whose records a commitment of `shown` authenticates, so that
    /// they go without their signature checks: the tresor holds no quarantined record, each record of it in
    /// the page is held under no other tresor, and its commitment describes this copy with every record of
    /// the page made the head of its record (`CommitmentPages`). None when held to the old path. Changes nothing.
    func vouched(
        _ changes: [PulledChange],
        shown: [StateCommitment],
        tresors: [UUID: String],
        patient: Certificate,
        signatures: SignatureCheck,
        _ tx: LocalStore.Transaction
    ) throws -> Set<UUID> {
        guard !signatures.perRecordOnly else { return [] }
        let candidates = CommitmentPages.candidates(changes, shown: shown)
        guard !candidates.isEmpty else { return [] }
        var excluded = try tx.quarantinedTresors(among: Set(candidates.keys))
        var trial = self
        for env in changes.compactMap(\.envelope) {
            let id = env.header.tresorID
            guard candidates[id] != nil, !excluded.contains(id) else { continue }
            let rid = env.header.recordID.hex
            if let local = try tx.record(rid), local.envelope.header.tresorID != id {
                excluded.insert(id)
                continue
            }
            let old = try tx.serverHead(rid)
            guard old?.versionID != env.versionID else { continue }
            do { try trial.replace(env.header, rid, old: old, with: env.versionID) } catch { excluded.insert(id) }
        }
        var out = Set<UUID>()
        for (id, c) in candidates where !excluded.contains(id) {
            guard let category = tresors[id] else { continue }
            let prospective = trial.sets[id] ?? HeadSet()
            if CommitmentPages.vouches(c, tresor: id, category: category, patient: patient, accepted: commitments[id], prospective: prospective) {
                out.insert(id)
            }
        }
        return out
    }
}
