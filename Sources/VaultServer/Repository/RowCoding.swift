import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// JSON for the columns that hold signed statements. Sorted keys so equal values store equal text.
enum RowJSON {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    static func encode<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
        try JSONDecoder().decode(T.self, from: Data(text.utf8))
    }

    static func decodeOptional<T: Decodable>(_ type: T.Type, _ text: String?) throws -> T? {
        guard let text else { return nil }
        return try decode(T.self, text)
    }

    /// The highest sequence among stored user approvals; unreadable ones count as none.
    static func maxApprovalSequence(_ approvals: [String]) -> UInt64 {
        approvals.compactMap { try? decode(Approval.self, $0).sequence }.max() ?? 0
    }
}

/// A number read from the database that no honest server wrote (a negative count or sequence, one at the
/// limit of its column, an epoch past 32 bits): the request fails with a 500 instead of trapping the process.
struct StoredNumberOutOfRange: Error, CustomStringConvertible {
    let what: String
    let value: String
    var description: String { "the database holds \(what) \(value), out of range: it was changed outside the server" }

    /// `value` + 1 for a stored sequence, which is never negative, when the result still fits its column.
    static func successor(of value: Int64, _ what: String) throws -> Int64 {
        let (next, overflow) = value.addingReportingOverflow(1)
        guard value >= 0, !overflow else { throw StoredNumberOutOfRange(what: what, value: String(value)) }
        return next
    }

    /// `value` + 1 when the result still fits a signed 64-bit column.
    static func successor(of value: UInt64, _ what: String) throws -> UInt64 {
        guard value < UInt64(Int64.max) else { throw StoredNumberOutOfRange(what: what, value: String(value)) }
        return value + 1
    }
}

extension StoredRow {
    /// A column holding a count or sequence, which is never negative.
    func uint64(_ column: String) throws -> UInt64 {
        let v = try int64(column)
        guard let u = UInt64(exactly: v) else { throw StoredNumberOutOfRange(what: column, value: String(v)) }
        return u
    }

    /// A column holding a 32-bit unsigned number (an epoch).
    func uint32(_ column: String) throws -> UInt32 {
        let v = try int64(column)
        guard let u = UInt32(exactly: v) else { throw StoredNumberOutOfRange(what: column, value: String(v)) }
        return u
    }
}

/// Builds audit entries (format 2) for a batch of events, chained onto the given head, each about a patient
/// linked to the newest earlier entry about that patient (Docs/envelope-v1.md §3.1): two events about one
/// patient in one batch link the second to the first, not both to the stored head.
enum AuditBuilder {
    /// `patientHeads`: the hash of the newest stored entry about each patient the events name, when there is
    /// one; `serverSecret`: the database's, from which each patient's audit key is derived.
    static func entries(
        for events: [AuditEvent],
        after head: (sequence: UInt64, hash: String),
        patientHeads: [UUID: String],
        serverSecret: [UInt8],
        now: UnixMillis
    ) throws -> [AuditEntry] {
        var previous = head.hash
        var sequence = head.sequence
        var heads = patientHeads
        var keys: [UUID: [UInt8]] = [:]
        for p in patients(events) { keys[p] = try patientKey(p, serverSecret: serverSecret) }
        return try events.map { e in
            sequence = try StoredNumberOutOfRange.successor(of: sequence, "the audit sequence")
            var entry = AuditEntry(
                sequence: sequence,
                at: e.at ?? now,
                actor: e.actor,
                action: e.action,
                patientID: e.patientID,
                details: e.details,
                previousHash: previous,
                hash: "",
                format: AuditChain.currentFormat,
                patientLink: e.patientID.map { AuditChain.patientLink(key: keys[$0] ?? [], previous: heads[$0]) }
            )
            guard let hash = AuditChain.hash(of: entry) else {
                throw AuditChainBreak(sequence: sequence, reason: .editedEntry, detail: "entry format \(entry.entryFormat) has no hash")
            }
            entry.hash = hash
            previous = entry.hash
            if let p = e.patientID { heads[p] = entry.hash }
            return entry
        }
    }

    /// The patients `events` are about, each once.
    static func patients(_ events: [AuditEvent]) -> [UUID] { Array(Set(events.compactMap(\.patientID))) }

    /// A patient's audit key (Docs/envelope-v1.md §3.1): fixed for good, known to the server and, through
    /// its access log, to that patient only; derived from the database's secret.
    static func patientKey(_ patient: UUID, serverSecret: [UInt8]) throws -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-audit-patient-key-v1")
        w.append(patient)
        return try BLAKE2b.hash(w.bytes, key: SecureBytes(copying: serverSecret))
    }
}

/// One result row of either backend, read by column name, so each stored type is decoded once for both.
protocol StoredRow {
    func string(_ column: String) throws -> String
    func optionalString(_ column: String) throws -> String?
    func int64(_ column: String) throws -> Int64
    func optionalInt64(_ column: String) throws -> Int64?
    func uuid(_ column: String) throws -> UUID
    func optionalUUID(_ column: String) throws -> UUID?
    func bool(_ column: String) throws -> Bool
    func bytes(_ column: String) throws -> [UInt8]
}

/// A value made from one stored row.
protocol StoredRowDecodable {
    init(stored row: some StoredRow) throws
}

/// What a `.notFound` error calls a missing user or share.
extension UserRow {
    static let noun = "user"
}

extension ShareRow {
    static let noun = "share"
}

extension StoredRow {
    /// A column holding a signed statement as JSON.
    func json<T: Decodable>(_ type: T.Type, _ column: String) throws -> T {
        try RowJSON.decode(T.self, string(column))
    }

    func optionalJSON<T: Decodable>(_ type: T.Type, _ column: String) throws -> T? {
        try RowJSON.decodeOptional(T.self, optionalString(column))
    }
}

extension HeadKey: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        hlcPhysical = try r.int64("hlc_physical")
        hlcCounter = try r.int64("hlc_counter")
        hlcDevice = try r.string("hlc_device")
        deleted = try r.bool("deleted")
    }
}

extension ChangeRow: StoredRowDecodable {
    /// Read from `heads.sequence` joined with `versions.envelope`.
    init(stored r: some StoredRow) throws {
        try self.init(sequence: r.uint64("sequence"), envelope: r.bytes("envelope"))
    }
}

extension UserRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        try self.init(
            id: r.uuid("id"),
            username: r.string("username"),
            role: Role(rawValue: r.string("role")) ?? .patient,
            status: AccountStatus(rawValue: r.string("status")) ?? .pending,
            registration: r.json(RegistrationRequest.self, "registration"),
            certificate: r.optionalJSON(Certificate.self, "certificate"),
            approval: r.optionalJSON(Approval.self, "approval"),
            rejectReason: r.optionalString("reject_reason"),
            createdAt: r.int64("created_at"),
            updatedAt: r.int64("updated_at")
        )
    }
}

extension SessionRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        try self.init(
            tokenHash: r.string("token_hash"),
            userID: r.uuid("user_id"),
            createdAt: r.int64("created_at"),
            expiresAt: r.int64("expires_at")
        )
    }
}

extension TresorRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        try self.init(
            id: r.uuid("id"),
            ownerID: r.uuid("owner_id"),
            category: r.string("category"),
            currentEpoch: r.uint32("current_epoch"),
            selfGrant: r.json(Grant.self, "self_grant"),
            updatedAt: r.int64("updated_at")
        )
    }
}

extension ShareRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        try self.init(
            id: r.uuid("id"),
            patientID: r.uuid("patient_id"),
            doctorID: r.uuid("doctor_id"),
            tresorID: r.uuid("tresor_id"),
            category: r.string("category"),
            state: ShareState(rawValue: r.string("state")) ?? .rejected,
            grant: r.json(Grant.self, "grant_json"),
            approval: r.optionalJSON(Approval.self, "approval"),
            latestGrant: r.optionalJSON(Grant.self, "latest_grant"),
            revocation: r.optionalJSON(ShareRevocation.self, "revocation_json"),
            reason: r.optionalString("reason"),
            createdAt: r.int64("created_at"),
            updatedAt: r.int64("updated_at"),
            expiresAt: r.optionalInt64("expires_at")
        )
    }
}

extension AuditEntry: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        try self.init(
            sequence: r.uint64("sequence"),
            at: r.int64("at"),
            actor: r.string("actor"),
            action: r.string("action"),
            patientID: r.optionalUUID("patient_id"),
            details: r.json([String: String].self, "details"),
            previousHash: r.string("previous_hash"),
            hash: r.string("hash"),
            format: try Self.format(r.int64("format")),
            patientLink: r.optionalString("patient_link")
        )
    }

    /// Format 1 reads as absent, as on the wire; a value no format has keeps a hash nothing matches.
    static func format(_ stored: Int64) -> UInt8? {
        let f = UInt8(clamping: stored)
        return f == 1 ? nil : f
    }
}

/// The `audit_head` row: where the next appended entry chains on.
struct AuditHeadRow: StoredRowDecodable, Sendable {
    var sequence: UInt64
    var hash: String

    init(stored r: some StoredRow) throws {
        sequence = try r.uint64("sequence")
        hash = try r.string("hash")
    }
}
