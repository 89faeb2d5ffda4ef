import Foundation
import VaultAPI
import VaultCore

/// A patient's access log checked against the newest admin-signed checkpoint (Docs/design.md §6).
public struct VerifiedAccessLog: Sendable {
    /// The patient's entries, oldest first.
    public var entries: [AuditEntry]
    /// The newest checkpoint the entries were verified against; nil when the server holds none yet.
    public var checkpoint: AuditCheckpoint?

    /// Whether `entry` lies at or before the checkpoint, so that a rewrite of it would have been caught;
    /// later entries are "not yet checkpointed".
    public func isCheckpointed(_ entry: AuditEntry) -> Bool { entry.sequence <= (checkpoint?.sequence ?? 0) }
}

extension PatientVault {
    /// The patient's own access log as the server lists it (who read what, logins, share changes),
    /// unverified; `verifiedAccessLog()` checks it against the signed checkpoints.
    public func accessLog(after: UInt64 = 0) async throws -> [AuditEntry] {
        var entries: [AuditEntry] = []
        var cursor = after
        while true {
            let page: AuditPage = try await transport.send(.GET, Routes.accessLog + "?after=\(cursor)&limit=500", auth: try auth)
            entries += page.entries
            try ClientError.requireProgress(from: cursor, to: page.nextCursor, empty: page.entries.isEmpty)
            cursor = page.nextCursor
            if page.done || page.entries.isEmpty { return entries }
        }
    }

    /// The checkpoint remembered on this device for this account.
    nonisolated var checkpointStore: AuditCheckpointStore {
        AuditCheckpointStore(url: account.store.folder.appendingPathComponent("audit-checkpoint.json"))
    }

    /// The access log, verified: every checkpoint must be signed by the pinned admin key; the chain's hashes
    /// (sequence, previous hash, hash; no contents) must link from the first entry to the newest checkpoint's
    /// signed hash; each of the patient's entries up to it must hash to the chain's hash at its sequence; and
    /// the checkpoint this device saw last must still be listed. So an entry of this patient removed or
    /// edited before a checkpoint in the server's database, with the chain rehashed, is caught; a server
    /// lying in its answers is not always (Docs/design.md §6). Costs O(entries in the whole log) in hashes
    /// downloaded. Entries after the checkpoint are only checked to hash to their own fields.
    public func verifiedAccessLog() async throws -> VerifiedAccessLog {
        let entries = try await accessLog()
        let list: AuditCheckpointList = try await transport.send(.GET, Routes.accessLogCheckpoints, auth: try auth)
        let store = checkpointStore
        do {
            var check = try AuditChainCheck(checkpoints: list.checkpoints, adminKey: adminKey, remembered: try store.newest())
            var mine: [UInt64: AuditEntry] = [:]
            for e in entries {
                guard e.patientID == me, AuditChain.hash(of: e) == e.hash, mine.updateValue(e, forKey: e.sequence) == nil else {
                    throw AuditChainBreak(sequence: e.sequence, reason: .editedEntry, detail: "the entry is not yours or does not hash to its fields")
                }
            }
            let target = check.newestCheckpoint?.sequence ?? 0
            var cursor: UInt64 = 0
            while cursor < target {
                let path = Routes.accessLogChain + "?after=\(cursor)&limit=\(APILimits.defaultLinkLimit)"
                let page: AuditLinkPage = try await transport.send(.GET, path, auth: try auth)
                for link in page.links where link.sequence <= target {
                    try check.append(sequence: link.sequence, previousHash: link.previousHash, hash: link.hash)
                    if let e = mine[link.sequence], e.previousHash != link.previousHash || e.hash != link.hash {
                        throw AuditChainBreak(sequence: e.sequence, reason: .editedEntry, detail: "your entry is not the one on the signed chain")
                    }
                }
                if page.links.isEmpty || page.done { break }
                try ClientError.requireProgress(from: cursor, to: page.nextCursor, empty: false)
                cursor = page.nextCursor
            }
            try check.finish()
            if let newest = check.newestMatched { try store.remember(newest) }
            return VerifiedAccessLog(entries: entries, checkpoint: check.newestMatched)
        } catch let broken as AuditChainBreak {
            throw ClientError.integrity("the access log does not verify at \(broken)")
        }
    }
}
