import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// What the admin's own check of the audit log found (Docs/design.md §6).
public struct AuditChainReport: Codable, Sendable, Equatable {
    /// True when the chain and every checkpoint verified.
    public var ok: Bool
    /// How many entries were walked before the end or the break.
    public var entriesChecked: UInt64
    /// How many signed checkpoints the server lists.
    public var checkpoints: Int
    /// The newest checkpoint the chain reached and matched.
    public var newestCheckpoint: AuditCheckpoint?
    /// The first broken sequence and why; nil when `ok`.
    public var broken: AuditChainBreak?
    /// Where an incremental check (`verifyAuditChainSinceCheckpoint`) resumed: the remembered checkpoint's
    /// sequence, the entries after it walked here. Nil when the whole log was walked from entry 1.
    public var resumedAt: UInt64?
}

extension AdminClient {
    /// Every entry of the audit log, oldest first, fetched a page at a time.
    public func allAuditEntries() async throws -> [AuditEntry] { try await auditEntries(after: 0) }

    /// Every entry after entry `after`, oldest first, fetched a page at a time.
    public func auditEntries(after: UInt64) async throws -> [AuditEntry] {
        var entries: [AuditEntry] = []
        var cursor = after
        while true {
            let page = try await auditLog(after: cursor, limit: 1_000)
            entries += page.entries
            try ClientError.requireProgress(from: cursor, to: page.nextCursor, empty: page.entries.isEmpty)
            cursor = page.nextCursor
            if page.done || page.entries.isEmpty { return entries }
        }
    }

    /// The signed checkpoints the server holds, as it lists them.
    public func auditCheckpoints() async throws -> [AuditCheckpoint] {
        let list = try await transport.send(AdminEndpoints.auditCheckpoints, auth: auth)
        return list.checkpoints
    }

    /// Checks the whole audit log here, without relying on the server's verdict: sequence numbers from 1
    /// without gaps, every previous-hash link, every hash recomputed from its entry, every checkpoint
    /// signed by the admin key and equal to the chain's hash at its sequence, and the newest checkpoint
    /// `store` remembers still listed and reached. A chain that verifies moves `store` to its newest
    /// checkpoint. Returns the entries too, for `checkpointAudit`.
    public func verifyAuditChain(store: AuditCheckpointStore?) async throws -> (report: AuditChainReport, entries: [AuditEntry]) {
        let remembered = try store?.newest()
        let checkpoints = try await auditCheckpoints()
        let entries = try await allAuditEntries()
        var walked: UInt64 = 0
        var matched: AuditCheckpoint?
        do {
            var check = try AuditChainCheck(checkpoints: checkpoints, adminKey: pinnedKey, remembered: remembered)
            for e in entries {
                guard AuditChain.hash(of: e) == e.hash else {
                    throw AuditChainBreak(sequence: e.sequence, reason: .editedEntry, detail: "its fields no longer hash to its stored hash")
                }
                try check.append(sequence: e.sequence, previousHash: e.previousHash, hash: e.hash)
                walked = check.last
                matched = check.newestMatched
            }
            try check.finish()
        } catch let broken as AuditChainBreak {
            let report = AuditChainReport(
                ok: false,
                entriesChecked: walked,
                checkpoints: checkpoints.count,
                newestCheckpoint: matched,
                broken: broken
            )
            return (report, entries)
        }
        if let matched { try store?.remember(matched) }
        let report = AuditChainReport(ok: true, entriesChecked: walked, checkpoints: checkpoints.count, newestCheckpoint: matched, broken: nil)
        return (report, entries)
    }

    /// Verifies the chain, then signs a checkpoint at its newest entry, stores it on the server and
    /// remembers it in `store`. A broken chain is an integrity failure and nothing is signed. The check
    /// resumes at the checkpoint `store` remembers (`verifyAuditChainSinceCheckpoint`) unless `full`.
    @discardableResult
    public func checkpointAudit(
        store: AuditCheckpointStore?,
        full: Bool = false,
        now: UnixMillis = Date().unixMillis
    ) async throws -> AuditCheckpoint {
        let (report, entries) = try await full ? verifyAuditChain(store: store) : verifyAuditChainSinceCheckpoint(store: store)
        return try await signCheckpoint(verified: report, entries: entries, store: store, now: now)
    }

    /// Signs a checkpoint at the newest of `entries`, which `report` found intact, stores it on the server
    /// and remembers it in `store`. When the newest checkpoint is already there, that one is returned.
    public func signCheckpoint(
        verified report: AuditChainReport,
        entries: [AuditEntry],
        store: AuditCheckpointStore?,
        now: UnixMillis = Date().unixMillis
    ) async throws -> AuditCheckpoint {
        if let broken = report.broken { throw ClientError.integrity("audit log broken at \(broken); nothing was signed") }
        guard let head = entries.last else { throw ClientError.invalidRequest("the audit log is empty: there is nothing to checkpoint") }
        if let newest = report.newestCheckpoint, newest.sequence == head.sequence { return newest }
        let checkpoint = AuditCheckpoint.sign(sequence: head.sequence, headHash: head.hash, signedAt: now, adminKey: key)
        let stored = try await transport.send(AdminEndpoints.signCheckpoint, checkpoint, auth: auth)
        guard stored == checkpoint else { throw ClientError.integrity("the server answered with another checkpoint than the one sent") }
        try store?.remember(checkpoint)
        return checkpoint
    }
}

extension ClientError {
    /// A cursor that does not move would page for ever: a server doing that is not answering the API.
    static func requireProgress(from cursor: UInt64, to next: UInt64, empty: Bool) throws {
        guard empty || next > cursor else { throw ClientError.integrity("the server's pages do not advance") }
    }
}
