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
    /// Where the check resumed (`PatientVault.verifiedAccessLog(full:)`): the sequence of the link its last
    /// passing check ended at, the links after it checked here. Nil when the chain was walked from entry 1.
    public var resumedAfter: UInt64? = nil
    /// How many of the chain's links the walk that gave this answer downloaded (resuming: the remembered
    /// link and those after it).
    public var linksRead = 0
    /// Set when this device had checked the log before and the chain now differs from what it checked then
    /// at or before the point it remembered (another hash there, the log cut before it, or the patient's
    /// entries up to it not the same ones), while the full check passes: honest after a server restored from
    /// a backup, but the patient is told. A sentence in plain words; nil otherwise.
    public var rewrittenSinceLastCheck: String? = nil

    /// A checked log (the dashboard's tests build one).
    public init(
        entries: [AuditEntry],
        checkpoint: AuditCheckpoint?,
        resumedAfter: UInt64? = nil,
        linksRead: Int = 0,
        rewrittenSinceLastCheck: String? = nil
    ) {
        self.entries = entries
        self.checkpoint = checkpoint
        self.resumedAfter = resumedAfter
        self.linksRead = linksRead
        self.rewrittenSinceLastCheck = rewrittenSinceLastCheck
    }

    /// Whether `entry` lies at or before the checkpoint, so that a rewrite of it would have been caught;
    /// later entries are "not yet checkpointed". No chain has an entry 0 (the check refuses one).
    public func isCheckpointed(_ entry: AuditEntry) -> Bool { entry.sequence > 0 && entry.sequence <= (checkpoint?.sequence ?? 0) }
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
    /// link; each of the patient's entries must hash to its fields and be the chain's entry at its sequence
    /// (every listed entry compared with its link; one at sequence 0, of another format or past the chain's
    /// end is refused); the patient's format-2 entries must link one to the next; no other link may continue
    /// the patient's own links; and the checkpoint this device saw last must still be listed. So an entry
    /// about this patient removed, untagged or edited in the server's database is caught, and up to a
    /// checkpoint also with the chain rehashed.
    ///
    /// Unless `full`, the walk resumes where this device's last passing check ended (`AccessLogResumePoint`)
    /// when the server still lists the link there with the hash walked to, the patient's entries up to it
    /// and the checkpoints below it exactly as checked then, and the remembered checkpoint: that link is
    /// checked again as the full walk checks it (all but its previous hash, which for format 2 its recomputed
    /// hash covers) and the links after it as above. Anything else, or a break after it, runs the walk from
    /// entry 1, whose verdict is the answer. Any integrity failure marks that the next checks must walk from
    /// entry 1 (`AccessLogCheckState`) until one passes. All of the patient's entries are downloaded either
    /// way; of the links, resuming, one per entry written since the last check (the walk from entry 1:
    /// O(entries in the whole log)). What a resumption does not re-check: damage to the links before that
    /// point that leaves the patient's entries and the link there alone (someone else's entry removed or
    /// relinked without rehashing, a listed digest or patient link changed in place), which `full` (and the
    /// admin's full check) finds.
    public func verifiedAccessLog(full: Bool = false) async throws -> VerifiedAccessLog {
        let (entries, served) = try await accessLogPages(after: 0)
        let list = try await transport.send(AccessLogEndpoints.checkpoints, auth: try auth)
        let state = checkState
        // What the device last checked, for the full walk to compare with, whether or not it resumes there.
        let remembered = AccessLogResumePoint.load(state.pointURL)
        if !full, let point = try state.resumePoint() {
            do {
                return try await walkAccessLog(entries: entries, served: served, checkpoints: list.checkpoints, from: point)
            } catch let broken as AuditChainBreak {
                // Not resumable, or not intact after the point: the full walk decides, and until one passes no
                // check resumes (a crash before it, or another check running now, walks in full too).
                try state.requireFullCheck(reason: "a resumed check stopped at \(broken)")
            } catch ClientError.integrity(let message) {
                throw integrityFailure(message, state)
            }
        }
        let markAtStart = try state.mark()
        do {
            return try await walkAccessLog(
                entries: entries,
                served: served,
                checkpoints: list.checkpoints,
                from: nil,
                comparedWith: remembered,
                markAtStart: markAtStart
            )
        } catch let broken as AuditChainBreak {
            throw integrityFailure("the access log does not verify at \(broken)", state)
        } catch ClientError.integrity(let message) {
            throw integrityFailure(message, state)
        }
    }

    /// The integrity failure `message`, once the next checks are marked to walk from entry 1; when the mark
    /// cannot be kept, the failure says so.
    nonisolated func integrityFailure(_ message: String, _ state: AccessLogCheckState) -> ClientError {
        do { try state.requireFullCheck(reason: message) } catch {
            return .integrity("\(message) (and this device could not record that its next check must walk the whole chain: \(error))")
        }
        return .integrity(message)
    }

    /// The files the access-log check keeps between runs, in this account's profile.
    nonisolated var checkState: AccessLogCheckState { AccessLogCheckState(folder: account.store.folder) }

    /// Where this device keeps the point its next access-log check resumes at.
    nonisolated var resumeURL: URL { checkState.pointURL }

    /// Walks the chain's links from entry 1, or from `point` when its conditions hold (else throws an
    /// `AuditChainBreak` at its sequence), checking `entries` against them; on success remembers the
    /// checkpoint, the marks and the new resume point (`AccessLogCheckState.keep`). A walk from entry 1
    /// compares the chain with `remembered`, the point this device last kept.
    private func walkAccessLog(
        entries: [AuditEntry],
        served: String?,
        checkpoints: [AuditCheckpoint],
        from point: AccessLogResumePoint?,
        comparedWith remembered: AccessLogResumePoint? = nil,
        markAtStart: Data? = nil
    ) async throws -> VerifiedAccessLog {
        let store = checkpointStore
        let rememberedCheckpoint = try store.newest()
        var check: AuditChainCheck
        if let point {
            check = try AuditChainCheck(
                checkpoints: checkpoints,
                adminKey: adminKey,
                remembered: rememberedCheckpoint,
                resumingAfter: point.sequence,
                hash: point.hash
            )
        } else {
            check = try AuditChainCheck(checkpoints: checkpoints, adminKey: adminKey, remembered: rememberedCheckpoint)
        }
        let markURL = account.store.folder.appendingPathComponent("audit-marks.json")
        let rememberedMarks = try AuditLogMarks.load(markURL)
        var marks = rememberedMarks
        let key = try auditKey(served: served, marks: &marks)
        if let point {
            let listed = rememberedCheckpoint.map { r in checkpoints.contains { $0.sequence == r.sequence && $0.headHash == r.headHash } } ?? true
            guard listed, point.matches(entries: entries, checkpoints: checkpoints, marks: marks) else {
                throw AuditChainBreak(sequence: point.sequence, reason: .brokenLink, detail: "the log is not the one this device checked up to here")
            }
        }
        // Resuming, the link at the point is the walk's first: it is checked as any other, and must still
        // hold the hash walked to (`matches` has made sure its sequence is at least 1).
        let first = point.map { $0.sequence - 1 } ?? 0
        var links = try AccessLogLinks(patient: me, key: key, entries: entries, formatTwoFrom: marks.formatTwoFrom, after: first)
        var cursor = first
        var anchor = point
        var read = 0
        var hashAtRemembered: String?
        while true {
            let chain = AccessLogEndpoints.chain.query("after=\(cursor)&limit=\(APILimits.defaultLinkLimit)")
            let page = try await transport.send(chain, auth: try auth)
            read += page.links.count
            for link in page.links {
                if link.sequence == remembered?.sequence { hashAtRemembered = link.hash }
                if let a = anchor {
                    guard link.sequence == a.sequence, link.hash == a.hash else {
                        throw AuditChainBreak(
                            sequence: a.sequence,
                            reason: .brokenLink,
                            detail: "the link there is not the one this device walked to"
                        )
                    }
                    // `check` already stands at it: only its previous hash is not compared with link S - 1.
                    try links.append(link)
                    anchor = nil
                    continue
                }
                try check.append(sequence: link.sequence, previousHash: link.previousHash, hash: link.hash)
                try links.append(link)
            }
            if page.links.isEmpty || page.done { break }
            try ClientError.requireProgress(from: cursor, to: page.nextCursor, empty: false)
            cursor = page.nextCursor
        }
        if let a = anchor { throw AuditChainBreak(sequence: a.sequence, reason: .missingEntry, detail: "the log ends before it") }
        try check.finish()
        // Entries written while the links were read: listed now, or missing.
        let later = links.unlisted.isEmpty ? [] : try await accessLog(after: entries.last?.sequence ?? 0)
        try links.finish(later: later, last: check.last)
        if let newest = check.newestMatched { try store.remember(newest) }
        marks.formatTwoFrom = marks.formatTwoFrom ?? links.firstFormat2
        if marks != rememberedMarks { try marks.save(markURL) }
        // Only the later entries the walk covered and matched; newer ones show at the next run.
        let walked = Set(links.unlisted)
        let shown = entries + later.filter { walked.contains($0.sequence) }
        let next =
            check.last > 0
            ? AccessLogResumePoint(sequence: check.last, hash: check.head, marks: marks, entries: shown, checkpoints: checkpoints) : nil
        try checkState.keep(next == point ? nil : next, full: point == nil, markAtStart: markAtStart)
        var log = VerifiedAccessLog(entries: shown, checkpoint: check.newestMatched, resumedAfter: point?.sequence, linksRead: read)
        log.rewrittenSinceLastCheck = remembered?.rewritten(hashThere: hashAtRemembered, last: check.last, entries: shown)
        return log
    }
}
