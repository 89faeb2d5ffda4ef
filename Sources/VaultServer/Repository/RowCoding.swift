import Foundation
import VaultAPI
import VaultCore

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

/// Builds audit entries for a batch of events, chained onto the given head.
enum AuditBuilder {
    static func entries(for events: [AuditEvent], after head: (sequence: UInt64, hash: String), now: UnixMillis) -> [AuditEntry] {
        var previous = head.hash
        var sequence = head.sequence
        return events.map { e in
            sequence += 1
            let hash = AuditChain.hash(sequence: sequence, at: now, actor: e.actor, action: e.action, patientID: e.patientID,
                                       details: e.details, previousHash: previous)
            defer { previous = hash }
            return AuditEntry(sequence: sequence, at: now, actor: e.actor, action: e.action, patientID: e.patientID,
                              details: e.details, previousHash: previous, hash: hash)
        }
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

extension UserRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(id: try r.uuid("id"), username: try r.string("username"), role: Role(rawValue: try r.string("role")) ?? .patient,
                  status: AccountStatus(rawValue: try r.string("status")) ?? .pending,
                  registration: try RowJSON.decode(RegistrationRequest.self, try r.string("registration")),
                  certificate: try RowJSON.decodeOptional(Certificate.self, try r.optionalString("certificate")),
                  approval: try RowJSON.decodeOptional(Approval.self, try r.optionalString("approval")),
                  rejectReason: try r.optionalString("reject_reason"), createdAt: try r.int64("created_at"), updatedAt: try r.int64("updated_at"))
    }
}

extension SessionRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(tokenHash: try r.string("token_hash"), userID: try r.uuid("user_id"), createdAt: try r.int64("created_at"),
                  expiresAt: try r.int64("expires_at"))
    }
}

extension TresorRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(id: try r.uuid("id"), ownerID: try r.uuid("owner_id"), category: try r.string("category"),
                  currentEpoch: UInt32(try r.int64("current_epoch")), selfGrant: try RowJSON.decode(Grant.self, try r.string("self_grant")),
                  updatedAt: try r.int64("updated_at"))
    }
}

extension ShareRow: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(id: try r.uuid("id"), patientID: try r.uuid("patient_id"), doctorID: try r.uuid("doctor_id"), tresorID: try r.uuid("tresor_id"),
                  category: try r.string("category"), state: ShareState(rawValue: try r.string("state")) ?? .rejected,
                  grant: try RowJSON.decode(Grant.self, try r.string("grant_json")),
                  approval: try RowJSON.decodeOptional(Approval.self, try r.optionalString("approval")),
                  latestGrant: try RowJSON.decodeOptional(Grant.self, try r.optionalString("latest_grant")), reason: try r.optionalString("reason"),
                  createdAt: try r.int64("created_at"), updatedAt: try r.int64("updated_at"), expiresAt: try r.optionalInt64("expires_at"))
    }
}

extension HeadKey: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(hlcPhysical: try r.int64("hlc_physical"), hlcCounter: try r.int64("hlc_counter"), hlcDevice: try r.string("hlc_device"),
                  deleted: try r.bool("deleted"))
    }
}

extension ChangeRow: StoredRowDecodable {
    /// Read from `heads.sequence` joined with `versions.envelope`.
    init(stored r: some StoredRow) throws {
        self.init(sequence: UInt64(bitPattern: try r.int64("sequence")), envelopeJSON: try r.bytes("envelope"))
    }
}

extension AuditEntry: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(sequence: UInt64(try r.int64("sequence")), at: try r.int64("at"), actor: try r.string("actor"), action: try r.string("action"),
                  patientID: try r.optionalUUID("patient_id"), details: try RowJSON.decode([String: String].self, try r.string("details")),
                  previousHash: try r.string("previous_hash"), hash: try r.string("hash"))
    }
}

/// The `audit_head` row: where the next appended entry chains on.
struct AuditHeadRow: StoredRowDecodable {
    var sequence: UInt64
    var hash: String

    init(stored r: some StoredRow) throws {
        sequence = UInt64(try r.int64("sequence"))
        hash = try r.string("hash")
    }
}
