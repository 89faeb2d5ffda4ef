import Foundation
import GRDB
import VaultCore

extension PatientVault {
    // MARK: Healing a server that is behind

    /// Brings a server that is behind the state this device accepted (a restored backup) up to date again
    /// (Docs/design.md §5.2): pulls every head from the start, taking the newer ones and skipping those
    /// older than what the server showed before; tells the patient; and queues again every record of the
    /// tresors found behind, as stored (the versions the patient signed), for the push that follows. The
    /// commitments of that push are signed over this device's own copy of the heads, never over what the
    /// server shows. Anything else wrong with the server's state stays an integrity failure. Returns the
    /// tresors found behind: their versions go out without commitments, one batch after another, and each
    /// is committed to once at the end of the push (a commitment with a batch describes this device's whole
    /// copy, which the server reaches only once every batch is in).
    func heal(_ behind: [ServerBehind], _ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws -> Set<UUID> {
        let before = summary.pulled
        let pulled = try await replica(healing: true).pull(since: 0) { n in
            progress?(SyncProgress(phase: .pull, done: before + n, total: nil))
        }
        summary.conflictsResolved += pulled.resolved
        summary.pulled += pulled.pulled
        let expected = Set(pulled.behind.map(\.message))
        let other = pulled.problems.filter { !expected.contains($0) }
        guard other.isEmpty else { throw ClientError.integrity(other.joined(separator: "; ")) }
        var all = behind
        for b in pulled.behind where !all.contains(where: { $0.tresorID == b.tresorID }) { all.append(b) }
        let counts = try store.requeue(tresors: Set(all.map(\.tresorID)))
        for b in all.sorted(by: { $0.category < $1.category }) {
            let note = b.healing(counts[b.tresorID] ?? 0)
            summary.healed.append(note)
            progress?(SyncProgress(phase: .heal, done: 0, total: nil, note: note))
        }
        return Set(all.map(\.tresorID))
    }
}

extension LocalStore {
    /// Queues again, for the tresors `tresors`, every record this device holds that waits in no queue: the
    /// envelope exactly as stored (Docs/design.md §5.2). A tresor left with nothing queued is marked to be
    /// committed again, so the push that follows commits to it all the same. Returns how many versions
    /// were queued per tresor.
    func requeue(tresors: Set<UUID>) throws -> [UUID: Int] {
        try write { tx in
            var counts: [UUID: Int] = [:]
            var states = try ServerStates.load(tx)
            for tresor in tresors.sorted(by: { $0.uuidString < $1.uuidString }) {
                let rows = try Row.fetchAll(
                    tx.db.cachedStatement(
                        sql: """
                            SELECT r.record_id, r.envelope FROM records r
                            WHERE r.tresor_id = ? AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.record_id = r.record_id)
                            ORDER BY r.hlc_physical, r.hlc_counter, r.hlc_device
                            """
                    ),
                    arguments: [tresor.uuidString]
                )
                for row in rows {
                    let bytes: Data = row["envelope"]
                    let env = try StoredEnvelope.decode(bytes)
                    try tx.db.cachedStatement(sql: "INSERT INTO outbox (version_id, record_id, envelope) VALUES (?, ?, ?)")
                        .execute(arguments: [env.versionID, row["record_id"] as String, bytes])
                }
                counts[tresor] = rows.count
                let queued =
                    try Int.fetchOne(
                        tx.db.cachedStatement(
                            sql: "SELECT COUNT(*) FROM outbox o JOIN records r ON r.record_id = o.record_id WHERE r.tresor_id = ?"
                        ),
                        arguments: [tresor.uuidString]
                    ) ?? 0
                if queued == 0 { states.setUncommitted(tresor, true) }
            }
            try states.save(tx)
            return counts
        }
    }
}
