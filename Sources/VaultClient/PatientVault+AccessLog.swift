import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

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
        try await accessLogPages(after: after).entries
    }

    /// The access log after `after`, with the patient's audit key the server gave (the first page's).
    func accessLogPages(after: UInt64) async throws -> (entries: [AuditEntry], patientKey: String?) {
        var entries: [AuditEntry] = []
        var key: String?
        var cursor = after
        while true {
            let page = try await transport.send(AccessLogEndpoints.entries.query("after=\(cursor)&limit=500"), auth: try auth)
            entries += page.entries
            key = key ?? page.patientKey
            try ClientError.requireProgress(from: cursor, to: page.nextCursor, empty: page.entries.isEmpty)
            cursor = page.nextCursor
            if page.done || page.entries.isEmpty { return (entries, key) }
        }
    }

    /// The audit key of this patient's links (Docs/envelope-v1.md §3.1): the one this device remembers, else
    /// the one the server gave; a server that gives another key than before is refused.
    func auditKey(served: String?, marks: inout AuditLogMarks) throws -> [UInt8]? {
        if let known = marks.patientKey, let served, known != served {
            throw ClientError.integrity("the server gives another audit key for this account than before")
        }
        guard let key = marks.patientKey ?? served else { return nil }
        guard key.utf8.count == 64, key == key.lowercased(), let bytes = try? Hex.decode(key) else {
            throw ClientError.integrity("the server's audit key for this account is not 64 hex digits")
        }
        marks.patientKey = key
        return bytes
    }

    /// The checkpoint remembered on this device for this account.
    nonisolated var checkpointStore: AuditCheckpointStore {
        AuditCheckpointStore(url: account.store.folder.appendingPathComponent("audit-checkpoint.json"))
    }

    /// The access log, verified (Docs/design.md §6): every checkpoint must be signed by the pinned admin key;
    /// the chain's links (no contents) must link from the first entry to the newest checkpoint's signed hash
    /// and on to the end of the log; every link of format 2 must hash to its listed digest and per-patient
    /// link; each of the patient's entries must hash to its fields and be the chain's entry at its sequence;
    /// the patient's format-2 entries must link one to the next; no other link may continue the patient's
    /// own links; and the checkpoint this device saw last must still be listed. So an entry about this
    /// patient removed, untagged or edited in the server's database is caught, and up to a checkpoint also
    /// with the chain rehashed. Costs O(entries in the whole log) in links downloaded.
    public func verifiedAccessLog() async throws -> VerifiedAccessLog {
        let (entries, served) = try await accessLogPages(after: 0)
        let list = try await transport.send(AccessLogEndpoints.checkpoints, auth: try auth)
        let store = checkpointStore
        do {
            var check = try AuditChainCheck(checkpoints: list.checkpoints, adminKey: adminKey, remembered: try store.newest())
            let markURL = account.store.folder.appendingPathComponent("audit-marks.json")
            let remembered = try AuditLogMarks.load(markURL)
            var marks = remembered
            let key = try auditKey(served: served, marks: &marks)
            var links = try AccessLogLinks(patient: me, key: key, entries: entries, formatTwoFrom: marks.formatTwoFrom)
            var cursor: UInt64 = 0
            while true {
                let chain = AccessLogEndpoints.chain.query("after=\(cursor)&limit=\(APILimits.defaultLinkLimit)")
                let page = try await transport.send(chain, auth: try auth)
                for link in page.links {
                    try check.append(sequence: link.sequence, previousHash: link.previousHash, hash: link.hash)
                    try links.append(link)
                }
                if page.links.isEmpty || page.done { break }
                try ClientError.requireProgress(from: cursor, to: page.nextCursor, empty: false)
                cursor = page.nextCursor
            }
            try check.finish()
            // Entries written while the links were read: listed now, or missing.
            let later = links.unlisted.isEmpty ? [] : try await accessLog(after: entries.last?.sequence ?? 0)
            try links.finish(later: later, last: check.last)
            if let newest = check.newestMatched { try store.remember(newest) }
            marks.formatTwoFrom = marks.formatTwoFrom ?? links.firstFormat2
            if marks != remembered { try marks.save(markURL) }
            // Only the later entries the walk covered and matched; newer ones show at the next run.
            let walked = Set(links.unlisted)
            return VerifiedAccessLog(entries: entries + later.filter { walked.contains($0.sequence) }, checkpoint: check.newestMatched)
        } catch let broken as AuditChainBreak {
            throw ClientError.integrity("the access log does not verify at \(broken)")
        }
    }
}
