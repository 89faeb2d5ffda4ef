import Foundation
import VaultCrypto

/// The hash chain of the audit log (Docs/design.md §6): each entry's hash covers its fields and the previous
/// entry's hash, so editing, deleting or reordering any entry breaks every hash after it. The exact bytes
/// hashed are in Docs/envelope-v1.md §3.1; admin-signed `AuditCheckpoint`s pin the chain against rehashing.
public enum AuditChain {
    /// The `previousHash` of the first entry: 32 zero bytes, hex.
    public static let genesis = String(repeating: "0", count: 64)

    /// The newest entry format: `AuditChain.hash` for format 2 covers a digest of the contents and the
    /// entry's `patientLink` (Docs/envelope-v1.md §3.1).
    public static let currentFormat: UInt8 = 2

    /// The hash (hex) of one entry, covering its fields and the previous entry's hash (hex): format 1 as
    /// entries written before per-patient links, format 2 through `digest` and `patientLink`
    /// (Docs/envelope-v1.md §3.1). Nil for any other format: no stored hash can match it, so an entry of a
    /// format nobody defined never passes as intact.
    public static func hash(of entry: some AuditChainEntry) -> String? {
        switch entry.entryFormat {
        case 1:
            var w = CanonicalWriter(domain: "CareVault-audit-v1")
            w.append(entry.sequence)
            w.append(entry.at)
            w.append(entry.actor)
            w.append(entry.action)
            w.append(entry.patientID.map { $0.uuidString.lowercased() })
            appendDetails(entry.details, to: &w)
            w.append(entry.previousHash)
            return Hex.encode(try! BLAKE2b.hash(w.bytes))
        case 2:
            return linkHash(
                sequence: entry.sequence,
                digest: digest(of: entry),
                patientLink: entry.patientLink,
                previousHash: entry.previousHash
            )
        default:
            return nil
        }
    }

    /// The digest (hex) of a format-2 entry's contents: time, actor, action, patient and details.
    public static func digest(of entry: some AuditChainEntry) -> String {
        var w = CanonicalWriter(domain: "CareVault-audit-entry-v2")
        w.append(entry.at)
        w.append(entry.actor)
        w.append(entry.action)
        w.append(entry.patientID.map { $0.uuidString.lowercased() })
        appendDetails(entry.details, to: &w)
        return Hex.encode(try! BLAKE2b.hash(w.bytes))
    }

    /// A format-2 entry's hash from what `GET /v1/access-log/chain` lists for it, so that a patient can
    /// recompute every link, also of entries whose contents it never sees.
    public static func linkHash(sequence: UInt64, digest: String, patientLink: String?, previousHash: String) -> String {
        var w = CanonicalWriter(domain: "CareVault-audit-v2")
        w.append(sequence)
        w.append(digest)
        w.append(patientLink)
        w.append(previousHash)
        return Hex.encode(try! BLAKE2b.hash(w.bytes))
    }

    /// The `patientLink` of a format-2 entry about a patient: a hash of the patient's audit key and of the
    /// newest earlier entry about that patient (nil for none). Only the server and that patient hold the key,
    /// so only they can tell which entry a link continues (Docs/envelope-v1.md §3.1).
    public static func patientLink(key: [UInt8], previous: String?) -> String {
        var w = CanonicalWriter(domain: "CareVault-audit-patient-link-v1")
        w.append(key)
        w.append(previous)
        return Hex.encode(try! BLAKE2b.hash(w.bytes))
    }

    private static func appendDetails(_ details: [String: String], to w: inout CanonicalWriter) {
        let keys = details.keys.sorted()
        w.append(UInt32(keys.count))
        for k in keys {
            w.append(k)
            w.append(details[k]!)
        }
    }
}

/// What an audit entry's hash covers: its fields and the hash of the entry before it. The wire type
/// `AuditEntry` conforms, so the server that writes the chain and whoever verifies it hash the same fields.
public protocol AuditChainEntry {
    /// The entry's position, counted from 1.
    var sequence: UInt64 { get }
    /// When it was written, in Unix milliseconds.
    var at: UnixMillis { get }
    /// Who acted.
    var actor: String { get }
    /// What happened.
    var action: String { get }
    /// The patient it is about, when there is one.
    var patientID: UUID? { get }
    /// Further facts.
    var details: [String: String] { get }
    /// The previous entry's hash (hex); `AuditChain.genesis` for the first.
    var previousHash: String { get }
    /// The entry format: 1 for entries written before per-patient links, 2 since.
    var entryFormat: UInt8 { get }
    /// Format 2, about a patient: `AuditChain.patientLink` of the patient's audit key and the hash of the
    /// newest earlier entry about the same patient (none for the first); nil otherwise.
    var patientLink: String? { get }
}

extension AuditChainEntry {
    /// Format 1 unless the entry says otherwise.
    public var entryFormat: UInt8 { 1 }
    /// None unless the entry says otherwise.
    public var patientLink: String? { nil }
}

/// Where and why an audit chain does not verify: the first broken sequence number and a reason in plain words.
public struct AuditChainBreak: Error, Codable, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong at `sequence`.
    public enum Reason: String, Codable, Sendable {
        /// The entry's fields no longer hash to its stored hash.
        case editedEntry = "edited entry"
        /// A sequence number is skipped.
        case missingEntry = "missing entry"
        /// The entry's previous hash is not the hash of the entry before it, or entries are out of order.
        case brokenLink = "broken link"
        /// The chain does not reach a signed checkpoint's hash: history at or before it was rewritten.
        case checkpointMismatch = "checkpoint mismatch"
        /// A checkpoint this device saw before is gone from the server.
        case checkpointMissing = "checkpoint missing"
        /// A checkpoint the admin key did not sign.
        case forgedCheckpoint = "forged checkpoint"
    }

    /// The first sequence number known to be wrong (for a checkpoint: the checkpoint's own sequence).
    public var sequence: UInt64
    /// What is wrong there.
    public var reason: Reason
    /// The facts, in plain words.
    public var detail: String

    /// Describes a break at `sequence`.
    public init(sequence: UInt64, reason: Reason, detail: String) {
        self.sequence = sequence
        self.reason = reason
        self.detail = detail
    }

    public var description: String { "entry \(sequence): \(reason.rawValue): \(detail)" }
}

/// Walks the audit chain from its first entry and checks it against admin-signed checkpoints
/// (Docs/design.md §6): consecutive sequence numbers from 1, each previous hash equal to the hash before
/// it, and the hash at every checkpoint's sequence equal to the signed one. It sees only what each entry
/// claims as its hash; whoever has the entries recomputes that hash first (`AuditChain.hash(of:)`).
public struct AuditChainCheck: Sendable {
    /// The last sequence number walked (0 before the first).
    public private(set) var last: UInt64 = 0
    /// The hash of that entry (`AuditChain.genesis` before the first).
    public private(set) var head = AuditChain.genesis
    /// The newest checkpoint the walk has reached and matched.
    public private(set) var newestMatched: AuditCheckpoint?
    private let checkpoints: [UInt64: AuditCheckpoint]
    private let remembered: AuditCheckpoint?
    private let rememberedOnServer: Bool

    /// A walk against `checkpoints` (as the server listed them) and the newest checkpoint this device
    /// remembers, if any. Every checkpoint must verify under `adminKey`; two different ones for one
    /// sequence cannot both be true.
    public init(checkpoints: [AuditCheckpoint], adminKey: SigningPublicKey, remembered: AuditCheckpoint?) throws(AuditChainBreak) {
        var bySequence: [UInt64: AuditCheckpoint] = [:]
        for c in checkpoints + (remembered.map { [$0] } ?? []) {
            do { try c.verify(adminKey: adminKey) } catch {
                throw AuditChainBreak(sequence: c.sequence, reason: .forgedCheckpoint, detail: "the checkpoint does not verify: \(error)")
            }
            if let other = bySequence[c.sequence], other.headHash != c.headHash {
                throw AuditChainBreak(sequence: c.sequence, reason: .checkpointMismatch, detail: "two signed checkpoints name different hashes")
            }
            bySequence[c.sequence] = c
        }
        self.checkpoints = bySequence
        self.remembered = remembered
        rememberedOnServer = remembered.map { r in checkpoints.contains { $0.sequence == r.sequence && $0.headHash == r.headHash } } ?? true
    }

    /// A walk that resumes after `anchor`, one of `checkpoints` whose entry the caller found still holding
    /// the signed hash: the entries after it are checked as by a walk from 1, the checkpoints after it must
    /// be reached, and the chain before it is taken as `anchor` signed it (only a walk from 1 checks it).
    public init(
        checkpoints: [AuditCheckpoint],
        adminKey: SigningPublicKey,
        remembered: AuditCheckpoint?,
        resumingAt anchor: AuditCheckpoint
    ) throws(AuditChainBreak) {
        try self.init(checkpoints: checkpoints, adminKey: adminKey, remembered: remembered)
        guard self.checkpoints[anchor.sequence]?.headHash == anchor.headHash else {
            throw AuditChainBreak(sequence: anchor.sequence, reason: .checkpointMissing, detail: "the walk resumes at a checkpoint not listed")
        }
        last = anchor.sequence
        head = anchor.headHash
        newestMatched = anchor
    }

    /// A walk that resumes after entry `sequence`, whose hash a walk from 1 (or one resumed from such a walk)
    /// found to be `hash`: the entries after it are checked as by a walk from 1, and the checkpoints after it
    /// must be reached. A checkpoint at `sequence` must name `hash`; the checkpoints before it are taken as
    /// checked against the chain by that earlier walk (the caller holds them to the ones it checked), and the
    /// newest of those at or before `sequence` counts as reached.
    public init(
        checkpoints: [AuditCheckpoint],
        adminKey: SigningPublicKey,
        remembered: AuditCheckpoint?,
        resumingAfter sequence: UInt64,
        hash: String
    ) throws(AuditChainBreak) {
        try self.init(checkpoints: checkpoints, adminKey: adminKey, remembered: remembered)
        if let c = self.checkpoints[sequence], c.headHash != hash {
            throw AuditChainBreak(
                sequence: sequence,
                reason: .checkpointMismatch,
                detail: "the signed hash there differs from the one this device walked to"
            )
        }
        last = sequence
        head = hash
        newestMatched = self.checkpoints.values.filter { $0.sequence <= sequence }.max { $0.sequence < $1.sequence }
    }

    /// The newest checkpoint known, from the server or remembered.
    public var newestCheckpoint: AuditCheckpoint? { checkpoints.values.max { $0.sequence < $1.sequence } }

    /// Takes the next entry's sequence number, previous hash and hash.
    public mutating func append(sequence: UInt64, previousHash: String, hash: String) throws(AuditChainBreak) {
        guard sequence > last else {
            throw AuditChainBreak(sequence: sequence, reason: .brokenLink, detail: "entries are out of order or repeated after entry \(last)")
        }
        guard sequence == last + 1 else {
            throw AuditChainBreak(sequence: last + 1, reason: .missingEntry, detail: "the log jumps from entry \(last) to \(sequence)")
        }
        guard previousHash == head else {
            throw AuditChainBreak(sequence: sequence, reason: .brokenLink, detail: "its previous hash is not the hash of entry \(last)")
        }
        if let c = checkpoints[sequence] {
            guard c.headHash == hash else {
                throw AuditChainBreak(
                    sequence: sequence,
                    reason: .checkpointMismatch,
                    detail: "the chain's hash there differs from the signed one: " + Self.rewritten(c, after: newestMatched)
                )
            }
            newestMatched = c
        }
        last = sequence
        head = hash
    }

    /// Ends the walk: every checkpoint must have been reached, and the one this device remembers must
    /// still be on the server.
    public func finish() throws(AuditChainBreak) {
        if let c = checkpoints.values.filter({ $0.sequence > last }).min(by: { $0.sequence < $1.sequence }) {
            throw AuditChainBreak(
                sequence: c.sequence,
                reason: .checkpointMismatch,
                detail: "the log ends at entry \(last), before this signed checkpoint: " + Self.rewritten(c, after: newestMatched)
            )
        }
        if let r = remembered, !rememberedOnServer {
            throw AuditChainBreak(
                sequence: r.sequence,
                reason: .checkpointMissing,
                detail: "the server no longer lists the checkpoint signed \(AuditCheckpoint.time(r.signedAt)) that this device saw before"
            )
        }
    }

    static func rewritten(_ c: AuditCheckpoint, after matched: AuditCheckpoint?) -> String {
        let after = matched?.sequence ?? 0
        // Checked: the matched sequence comes from the server.
        let from = after < .max ? String(after + 1) : String(after)
        return "an entry from \(from) to \(c.sequence) was changed, removed or inserted and the chain rehashed"
    }
}
