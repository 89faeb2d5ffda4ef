import Foundation
import VaultAPI
import VaultCore

/// The patient's side of the audit chain's per-patient links (Docs/envelope-v1.md §3.1): what a patient
/// checks of the whole chain's links against its own entries, without seeing anyone else's contents.
struct AccessLogLinks {
    /// The patient's entries as the server listed them, by sequence.
    private(set) var mine: [UInt64: AuditEntry] = [:]
    /// The sequences of `mine` whose link the walk compared them with.
    private var matched: Set<UInt64> = []
    /// The links up to this sequence are not read (a resumed walk): the entries there are held to the
    /// resume point's digest instead.
    private let after: UInt64
    /// The patient links an entry about this patient may carry: the first one's and each one continuing one
    /// of its listed entries.
    private var own: Set<String>
    /// Links of format 2 carrying one of `own` that are not listed among the patient's entries.
    private(set) var unlisted: [UInt64] = []
    /// Those links, by sequence: an entry fetched again for one of them must be exactly that link's entry.
    private var unlistedLinks: [UInt64: AuditLink] = [:]
    private let key: [UInt8]?
    private var sawFormat2 = false
    /// The first sequence of format 2 in this walk.
    private(set) var firstFormat2: UInt64?
    private let patient: UUID
    private let formatTwoFrom: UInt64?

    /// Checks `entries` (each about `patient`, hashing to its own fields, once per sequence, each of format 2
    /// linked to the one before it) and keeps them for the walk over the links. `formatTwoFrom`: the first
    /// sequence of format 2 this device saw before, from which no link may be of format 1. `key`: the
    /// patient's audit key, nil when the server gave none. `after`: the walk's first link is the one after
    /// that sequence (`AccessLogResumePoint`), the links up to it checked by an earlier walk with the same
    /// marks; 0 for a walk from entry 1. An entry at sequence 0, or of a format other than 1 or 2, is refused:
    /// no link can stand for it.
    init(patient: UUID, key: [UInt8]?, entries: [AuditEntry], formatTwoFrom: UInt64?, after: UInt64 = 0) throws(AuditChainBreak) {
        self.patient = patient
        self.formatTwoFrom = formatTwoFrom
        self.key = key
        self.after = after
        // A walk that passed with these marks saw format 2 up to `after` exactly when they place its start there.
        sawFormat2 = after > 0 && formatTwoFrom.map { $0 <= after } == true
        own = Set(key.map { [AuditChain.patientLink(key: $0, previous: nil)] } ?? [])
        var previous: String?
        for e in entries.sorted(by: { $0.sequence < $1.sequence }) {
            guard e.sequence > 0, e.entryFormat == 1 || e.entryFormat == 2 else {
                throw AuditChainBreak(
                    sequence: e.sequence,
                    reason: .editedEntry,
                    detail: "the entry has sequence 0 or format \(e.entryFormat), which no chain holds"
                )
            }
            guard e.patientID == patient, AuditChain.hash(of: e) == e.hash, mine.updateValue(e, forKey: e.sequence) == nil else {
                throw AuditChainBreak(sequence: e.sequence, reason: .editedEntry, detail: "the entry is not yours or does not hash to its fields")
            }
            if e.entryFormat >= 2, key == nil {
                throw AuditChainBreak(
                    sequence: e.sequence,
                    reason: .missingEntry,
                    detail: "the server gave no audit key to check your entries' links"
                )
            }
            if e.entryFormat >= 2, let key, e.patientLink != AuditChain.patientLink(key: key, previous: previous) {
                throw AuditChainBreak(
                    sequence: e.sequence,
                    reason: .missingEntry,
                    detail: "it follows an entry about you that your access log does not list"
                )
            }
            previous = e.hash
            if let key { own.insert(AuditChain.patientLink(key: key, previous: e.hash)) }
        }
    }

    /// Takes the next link of the chain (after `AuditChainCheck` accepted it): a link of format 2 must hash
    /// to what it lists, formats never go back, and a link at one of the patient's sequences must be that entry.
    mutating func append(_ link: AuditLink) throws(AuditChainBreak) {
        switch link.format ?? 1 {
        case 1:
            guard !sawFormat2 else {
                throw AuditChainBreak(sequence: link.sequence, reason: .brokenLink, detail: "an entry of format 1 follows one of format 2")
            }
            if let from = formatTwoFrom, link.sequence >= from {
                throw AuditChainBreak(
                    sequence: link.sequence,
                    reason: .brokenLink,
                    detail: "it is of format 1, but this device saw format 2 from entry \(from) on"
                )
            }
        case 2:
            sawFormat2 = true
            if firstFormat2 == nil { firstFormat2 = link.sequence }
            guard let digest = link.digest,
                AuditChain.linkHash(sequence: link.sequence, digest: digest, patientLink: link.patientLink, previousHash: link.previousHash)
                    == link.hash
            else {
                throw AuditChainBreak(
                    sequence: link.sequence,
                    reason: .editedEntry,
                    detail: "its hash does not match the digest and link listed for it"
                )
            }
        default:
            throw AuditChainBreak(sequence: link.sequence, reason: .editedEntry, detail: "it has a format this device does not know")
        }
        if let e = mine[link.sequence] {
            guard e.previousHash == link.previousHash, e.hash == link.hash, e.entryFormat == link.format ?? 1 else {
                throw AuditChainBreak(sequence: e.sequence, reason: .editedEntry, detail: "your entry is not the one on the chain")
            }
            matched.insert(e.sequence)
        } else if let p = link.patientLink, own.contains(p) {
            unlisted.append(link.sequence)
            unlistedLinks[link.sequence] = link
            // An entry continuing this one is about the patient too, whether or not the server lists it.
            if let key { own.insert(AuditChain.patientLink(key: key, previous: link.hash)) }
        }
    }

    /// Ends the walk at `last`, the chain's last link: every listed entry after `after` must have been
    /// compared with its link (one past the chain's end is refused: the log was listed before the links were
    /// read, so an honest chain reaches it), and a link that continues the patient's own links must be one of
    /// its entries. `later` are the patient's entries listed after the first fetch (written while the links
    /// were read); those past `last` are not checked here and not shown.
    func finish(later: [AuditEntry], last: UInt64) throws(AuditChainBreak) {
        if let from = formatTwoFrom, last < from {
            throw AuditChainBreak(sequence: from, reason: .missingEntry, detail: "the log ends before this entry, which this device saw")
        }
        for s in mine.keys.sorted() where s > after && !matched.contains(s) {
            throw AuditChainBreak(
                sequence: s,
                reason: .missingEntry,
                detail: s > last
                    ? "your access log lists an entry there, past the chain's end at entry \(last)"
                    : "your access log lists an entry there that was not compared with the chain's link"
            )
        }
        let known = Dictionary(later.map { ($0.sequence, $0) }, uniquingKeysWith: { a, _ in a })
        for s in unlisted {
            // Fetched again, it must be the very entry the chain holds there (hash, link and format), not
            // another one that merely hashes to its own fields.
            guard let e = known[s], let link = unlistedLinks[s], e.patientID == patient, AuditChain.hash(of: e) == e.hash,
                e.hash == link.hash, e.previousHash == link.previousHash, e.entryFormat == link.format ?? 1,
                e.patientLink == link.patientLink
            else {
                throw AuditChainBreak(
                    sequence: s,
                    reason: .missingEntry,
                    detail: "the chain holds an entry about you there that your access log does not list"
                )
            }
        }
    }
}

/// What this device remembers of its access log besides the checkpoint (Docs/design.md §6): where entries
/// of format 2 began, so that a server later presenting links from there on as format 1 (whose hashes cannot
/// be recomputed) is caught; and the patient's audit key, so that a server cannot give another one.
struct AuditLogMarks: Codable, Equatable {
    /// The first sequence of format 2.
    var formatTwoFrom: UInt64?
    /// The patient's audit key, hex.
    var patientKey: String?

    /// The marks kept at `url`; none when no file was kept. An unreadable file is an error, never nothing.
    static func load(_ url: URL) throws -> AuditLogMarks {
        guard let data = try SecureFiles.read(url) else { return AuditLogMarks() }
        do { return try JSONDecoder().decode(AuditLogMarks.self, from: data) } catch {
            throw ClientError.localState("the audit marks file \(url.path) is unreadable; restore it from a backup or remove it")
        }
    }

    /// Stores the marks at `url` (mode 0600).
    func save(_ url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try SecureFiles.write(try encoder.encode(self), to: url)
    }
}
