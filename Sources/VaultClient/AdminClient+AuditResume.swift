import Foundation
import VaultAPI
import VaultCore

extension AdminClient {
    /// The check `audit checkpoint` runs before signing (Docs/design.md §6): instead of every entry, only
    /// those from the newest checkpoint `store` remembers. It resumes there when the server still lists
    /// that checkpoint, the entry at its sequence still hashes to its fields and has the signed hash, and
    /// the server's own check of its stored log (`GET /v1/admin/audit/verify`) passes; it then walks the
    /// entries after it here as the full check does (sequence, previous hash, hash recomputed, every later
    /// checkpoint reached) and checks every listed checkpoint's signature. Otherwise (no checkpoint
    /// remembered, or any of those conditions failing) it runs the full check, which names the break.
    ///
    /// What it leaves to the full check (`verifyAuditChain`, `audit verify`): the entries before the
    /// remembered checkpoint are not read here, so an edit there that leaves the stored hashes alone is
    /// caught only by the server's word or by the full check; nor is the chain checked against the older
    /// checkpoints. The entries returned start with the remembered checkpoint's.
    public func verifyAuditChainSinceCheckpoint(store: AuditCheckpointStore?) async throws -> (report: AuditChainReport, entries: [AuditEntry]) {
        guard let remembered = try store?.newest() else { return try await verifyAuditChain(store: store) }
        let checkpoints = try await auditCheckpoints()
        let listed = checkpoints.contains { $0.sequence == remembered.sequence && $0.headHash == remembered.headHash }
        // The server's own check reads its whole log: on a large log it may fail or run out of time, and
        // then the full check here runs instead of the command failing.
        let serverSaysWhole = listed && remembered.sequence > 0 ? ((try? await verifyAudit())?.ok ?? false) : false
        guard serverSaysWhole else { return try await verifyAuditChain(store: store) }
        let entries = try await auditEntries(after: remembered.sequence - 1)
        guard let anchor = entries.first, anchor.sequence == remembered.sequence, anchor.hash == remembered.headHash,
            AuditChain.hash(of: anchor) == anchor.hash
        else { return try await verifyAuditChain(store: store) }
        var walked: UInt64 = 0
        var matched: AuditCheckpoint? = remembered
        do {
            var check = try AuditChainCheck(checkpoints: checkpoints, adminKey: pinnedKey, remembered: remembered, resumingAt: remembered)
            for e in entries.dropFirst() {
                guard AuditChain.hash(of: e) == e.hash else {
                    throw AuditChainBreak(sequence: e.sequence, reason: .editedEntry, detail: "its fields no longer hash to its stored hash")
                }
                try check.append(sequence: e.sequence, previousHash: e.previousHash, hash: e.hash)
                walked += 1
                matched = check.newestMatched
            }
            try check.finish()
        } catch let broken as AuditChainBreak {
            let report = AuditChainReport(
                ok: false,
                entriesChecked: walked,
                checkpoints: checkpoints.count,
                newestCheckpoint: matched,
                broken: broken,
                resumedAt: remembered.sequence
            )
            return (report, entries)
        }
        if let matched { try store?.remember(matched) }
        let report = AuditChainReport(
            ok: true,
            entriesChecked: walked,
            checkpoints: checkpoints.count,
            newestCheckpoint: matched,
            broken: nil,
            resumedAt: remembered.sequence
        )
        return (report, entries)
    }
}
