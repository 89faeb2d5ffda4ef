import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// Where a patient's last passing access-log check ended (Docs/design.md §6, Docs/envelope-v1.md §2.5),
/// so that the next check downloads only the chain's links after it: the last link walked, the audit marks
/// walked with, and digests of the patient's own entries up to it and of the checkpoints below it as the
/// server listed them. The next check resumes only when the server still lists exactly these; anything
/// else sends it back to the full check.
struct AccessLogResumePoint: Codable, Equatable {
    /// The file's version; another one is ignored.
    var version = 1
    /// The sequence of the last link walked.
    var sequence: UInt64
    /// Its hash, 64 lower-case hex digits.
    var hash: String
    /// The audit marks the walk ended with (`audit-marks.json`).
    var marks: AuditLogMarks
    /// How many of the patient's entries lie at or below `sequence`.
    var entries: Int
    /// `digest(entries:)` of them.
    var entriesDigest: String
    /// How many listed checkpoints lie below `sequence`.
    var checkpoints: Int
    /// `digest(checkpoints:)` of them.
    var checkpointsDigest: String

    /// The point at the end of a walk to `sequence` with hash `hash` that checked `entries` (the patient's,
    /// as returned) and `checkpoints` (as listed) with `marks`.
    init(sequence: UInt64, hash: String, marks: AuditLogMarks, entries: [AuditEntry], checkpoints: [AuditCheckpoint]) {
        self.sequence = sequence
        self.hash = hash
        self.marks = marks
        let mine = Self.prefix(of: entries, upTo: sequence)
        self.entries = mine.count
        entriesDigest = Self.digest(entries: mine)
        let below = Self.prefix(of: checkpoints, below: sequence)
        self.checkpoints = below.count
        checkpointsDigest = Self.digest(checkpoints: below)
    }

    /// Whether a check may resume here: the server lists the same entries of the patient's at or below
    /// `sequence` and the same checkpoints below it as when this point was kept, and the marks are the same.
    /// (The link at `sequence` is compared with `hash` when it is downloaded.)
    func matches(entries listed: [AuditEntry], checkpoints listedCheckpoints: [AuditCheckpoint], marks current: AuditLogMarks) -> Bool {
        guard version == 1, sequence > 0, current == marks else { return false }
        let mine = Self.prefix(of: listed, upTo: sequence)
        let below = Self.prefix(of: listedCheckpoints, below: sequence)
        return mine.count == entries && Self.digest(entries: mine) == entriesDigest && below.count == checkpoints
            && Self.digest(checkpoints: below) == checkpointsDigest
    }

    /// What a walk from entry 1 that passed finds changed at or before this point since it was kept
    /// (Docs/design.md §6): `hashThere` is the hash of the chain's link at `sequence` (nil when the chain,
    /// ending at `last`, does not reach it) and `listed` the patient's entries. A sentence for the patient,
    /// nil when the link there and the patient's entries up to it are the ones remembered.
    func rewritten(hashThere: String?, last: UInt64, entries listed: [AuditEntry]) -> String? {
        guard version == 1, sequence > 0 else { return nil }
        let mine = Self.prefix(of: listed, upTo: sequence)
        let same = mine.count == entries && Self.digest(entries: mine) == entriesDigest
        guard hashThere != hash || !same else { return nil }
        let chain =
            hashThere == nil
            ? "the log now ends at entry \(last)"
            : hashThere == hash ? "entry \(sequence) still has the hash it had" : "entry \(sequence) now has another hash"
        let yours =
            same
            ? "your \(entries) entries up to there are unchanged"
            : mine.count == entries
                ? "your \(entries) entries up to there are not the same ones"
                : "you had \(entries) entries up to there and now have \(mine.count), not the same ones"
        return "the log was rewritten or cut at or before entry \(sequence) since this device last checked it (\(chain); \(yours))"
    }

    /// The patient's entries at or below `sequence`, by ascending sequence.
    static func prefix(of entries: [AuditEntry], upTo sequence: UInt64) -> [AuditEntry] {
        entries.filter { $0.sequence <= sequence }.sorted { $0.sequence < $1.sequence }
    }

    /// The checkpoints below `sequence`, in the order their digest takes them.
    static func prefix(of checkpoints: [AuditCheckpoint], below sequence: UInt64) -> [AuditCheckpoint] {
        checkpoints.filter { $0.sequence < sequence }.sorted {
            ($0.sequence, $0.signedAt, $0.headHash) < ($1.sequence, $1.signedAt, $1.headHash)
        }
    }

    /// The digest of the patient's entries, in the given order (Docs/envelope-v1.md §2.5): each entry's
    /// hash, which the check recomputes from its fields, pins those fields.
    static func digest(entries: [AuditEntry]) -> String {
        var w = CanonicalWriter(domain: "CareVault-access-log-entries-v1", capacity: 64 + entries.count * 160)
        w.append(UInt64(entries.count))
        for e in entries {
            w.append(e.sequence)
            w.append(e.entryFormat)
            w.append(e.hash)
            w.append(e.patientLink)
        }
        return Hex.encode(try! BLAKE2b.hash(w.bytes))
    }

    /// The digest of checkpoints, in the given order (Docs/envelope-v1.md §2.5).
    static func digest(checkpoints: [AuditCheckpoint]) -> String {
        var w = CanonicalWriter(domain: "CareVault-access-log-checkpoints-v1", capacity: 64 + checkpoints.count * 88)
        w.append(UInt64(checkpoints.count))
        for c in checkpoints {
            w.append(c.sequence)
            w.append(c.headHash)
            w.append(c.signedAt)
        }
        return Hex.encode(try! BLAKE2b.hash(w.bytes))
    }

    /// The point kept at `url`; nil when there is none or it cannot be read (the check then starts from
    /// entry 1, which costs time, never safety).
    static func load(_ url: URL) -> AccessLogResumePoint? {
        guard let data = try? SecureFiles.read(url) else { return nil }
        return try? JSONDecoder().decode(AccessLogResumePoint.self, from: data)
    }

    /// Stores the point at `url` (mode 0600).
    func save(_ url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try SecureFiles.write(try encoder.encode(self), to: url)
    }
}
