import Foundation
import VaultAPI
import VaultCore

/// The patient's side of the audit chain's per-patient links (Docs/envelope-v1.md §3.1): what a patient
/// checks of the whole chain's links against its own entries, without seeing anyone else's contents.
struct AccessLogLinks {
    /// The patient's entries as the server listed them, by sequence.
    private(set) var mine: [UInt64: AuditEntry] = [:]
    /// The hashes a link about this patient may continue: its genesis and each of its entries' hashes.
    private var own: Set<String>
    /// Links of format 2 that continue one of `own` but are not listed among the patient's entries.
    private(set) var unlisted: [UInt64] = []
    private var sawFormat2 = false
    /// The first sequence of format 2 in this walk.
    private(set) var firstFormat2: UInt64?
    private let patient: UUID
    private let formatTwoFrom: UInt64?

    /// Checks `entries` (each about `patient`, hashing to its own fields, once per sequence, each of format 2
    /// linked to the one before it) and keeps them for the walk over the links. `formatTwoFrom`: the first
    /// sequence of format 2 this device saw before, from which no link may be of format 1.
    init(patient: UUID, entries: [AuditEntry], formatTwoFrom: UInt64?) throws(AuditChainBreak) {
        self.patient = patient
        self.formatTwoFrom = formatTwoFrom
        own = [AuditChain.patientGenesis(patient)]
        var previous: String?
        for e in entries.sorted(by: { $0.sequence < $1.sequence }) {
            guard e.patientID == patient, AuditChain.hash(of: e) == e.hash, mine.updateValue(e, forKey: e.sequence) == nil else {
                throw AuditChainBreak(sequence: e.sequence, reason: .editedEntry, detail: "the entry is not yours or does not hash to its fields")
            }
            if e.entryFormat >= 2, e.patientPrevious != (previous ?? AuditChain.patientGenesis(patient)) {
                throw AuditChainBreak(
                    sequence: e.sequence,
                    reason: .missingEntry,
                    detail: "it follows an entry about you that your access log does not list"
                )
            }
            previous = e.hash
            own.insert(e.hash)
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
                AuditChain.linkHash(sequence: link.sequence, digest: digest, patientPrevious: link.patientPrevious, previousHash: link.previousHash)
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
        } else if let p = link.patientPrevious, own.contains(p) {
            unlisted.append(link.sequence)
        }
    }

    /// Ends the walk: a link that continues the patient's own links must be one of its entries. `later`
    /// are the patient's entries listed after the first fetch (written while the links were read).
    func finish(later: [AuditEntry], last: UInt64) throws(AuditChainBreak) {
        if let from = formatTwoFrom, last < from {
            throw AuditChainBreak(sequence: from, reason: .missingEntry, detail: "the log ends before this entry, which this device saw")
        }
        let known = Dictionary(later.map { ($0.sequence, $0) }, uniquingKeysWith: { a, _ in a })
        for s in unlisted {
            guard let e = known[s], e.patientID == patient, AuditChain.hash(of: e) == e.hash else {
                throw AuditChainBreak(
                    sequence: s,
                    reason: .missingEntry,
                    detail: "the chain holds an entry about you there that your access log does not list"
                )
            }
        }
    }
}

/// Where the log's entries of format 2 begin, as this device saw them (Docs/design.md §6): a server that
/// later presents links from there on as format 1, whose hashes cannot be recomputed, is caught.
struct AuditFormatMark: Codable {
    /// The first sequence of format 2.
    var formatTwoFrom: UInt64

    /// The remembered mark at `url`; nil when none was kept. An unreadable file is an error, never nothing.
    static func load(_ url: URL) throws -> UInt64? {
        guard let data = try SecureFiles.read(url) else { return nil }
        do { return try JSONDecoder().decode(AuditFormatMark.self, from: data).formatTwoFrom } catch {
            throw ClientError.localState("the audit format file \(url.path) is unreadable; restore it from a backup or remove it")
        }
    }

    /// Keeps `sequence` when no mark is kept yet; an earlier mark stays.
    static func remember(_ sequence: UInt64, at url: URL) throws {
        guard try load(url) == nil else { return }
        try SecureFiles.write(try JSONEncoder().encode(AuditFormatMark(formatTwoFrom: sequence)), to: url)
    }
}
