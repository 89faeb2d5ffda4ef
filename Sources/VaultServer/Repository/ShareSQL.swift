import Foundation
import VaultAPI
import VaultCore

/// The statements of tresors and shares (Docs/design.md §3), written once for both engines.
enum ShareSQL {
    static func tresor(_ id: UUID, _ lock: SQLStatement.ForUpdate? = nil) -> SQLStatement {
        "SELECT * FROM tresors WHERE id = \(id)\(forUpdate: lock)"
    }

    static func tresors(ownerID: UUID) -> SQLStatement { "SELECT * FROM tresors WHERE owner_id = \(ownerID) ORDER BY category" }

    static func insertTresor(_ t: TresorRow, grant: String) -> SQLStatement {
        """
        INSERT INTO tresors (id, owner_id, category, current_epoch, self_grant, updated_at)
        VALUES (\(t.id), \(t.ownerID), \(t.category), \(Int64(t.currentEpoch)), \(grant), \(t.updatedAt))
        """
    }

    static func updateTresor(_ t: TresorRow, grant: String) -> SQLStatement {
        "UPDATE tresors SET current_epoch = \(Int64(t.currentEpoch)), self_grant = \(grant), updated_at = \(t.updatedAt) WHERE id = \(t.id)"
    }

    static func insertShare(_ s: ShareRow, grant: String) -> SQLStatement {
        """
        INSERT INTO shares (id, patient_id, doctor_id, tresor_id, category, state, grant_json, created_at, updated_at, expires_at)
        VALUES (\(s.id), \(s.patientID), \(s.doctorID), \(s.tresorID), \(s.category), \(s.state.rawValue), \(grant), \(s.createdAt),
                \(s.updatedAt), \(s.expiresAt))
        """
    }

    static func share(_ id: UUID, _ lock: SQLStatement.ForUpdate? = nil) -> SQLStatement {
        "SELECT * FROM shares WHERE id = \(id)\(forUpdate: lock)"
    }

    static func shares(patientID: UUID) -> SQLStatement { "SELECT * FROM shares WHERE patient_id = \(patientID) ORDER BY created_at" }
    static func shares(doctorID: UUID) -> SQLStatement { "SELECT * FROM shares WHERE doctor_id = \(doctorID) ORDER BY created_at" }
    static func shares(state: ShareState) -> SQLStatement { "SELECT * FROM shares WHERE state = \(state.rawValue) ORDER BY created_at" }

    /// The shares between one doctor and one patient, oldest first.
    static func shares(doctorID: UUID, patientID: UUID) -> SQLStatement {
        "SELECT * FROM shares WHERE doctor_id = \(doctorID) AND patient_id = \(patientID) ORDER BY created_at"
    }

    /// The share that lets `doctorID` read one tresor of `patientID` at `now`, if any: at most one share
    /// of a patient, doctor and tresor is open (`shares_open`), so this reads one row, not all of the
    /// doctor's shares.
    static func activeShare(doctorID: UUID, patientID: UUID, tresorID: UUID, now: UnixMillis) -> SQLStatement {
        """
        SELECT * FROM shares WHERE patient_id = \(patientID) AND doctor_id = \(doctorID) AND tresor_id = \(tresorID)
          AND state = 'active' AND (expires_at IS NULL OR expires_at > \(now))
        ORDER BY created_at LIMIT 1
        """
    }

    /// A doctor's shares that let them in at `now`: active, and the end date (if any) not reached, whether
    /// or not `expireShares` has moved them yet.
    static func activeShares(doctorID: UUID, now: UnixMillis) -> SQLStatement {
        """
        SELECT * FROM shares WHERE doctor_id = \(doctorID) AND state = 'active' AND (expires_at IS NULL OR expires_at > \(now))
        ORDER BY created_at
        """
    }

    static func transition(_ id: UUID, _ t: ShareTransition, approval: String?, now: UnixMillis) -> SQLStatement {
        """
        UPDATE shares SET state = \(t.to.rawValue), approval = COALESCE(\(approval), approval),
               approval_sequence = COALESCE(\(t.approval.map { Int64(bitPattern: $0.sequence) }), approval_sequence),
               reason = COALESCE(\(t.reason), reason), updated_at = \(now)
        WHERE id = \(id)
        """
    }

    static func updateGrant(_ id: UUID, grant: String, now: UnixMillis) -> SQLStatement {
        "UPDATE shares SET latest_grant = \(grant), updated_at = \(now) WHERE id = \(id)"
    }

    /// The patient's signed revocation; the first one stays.
    static func recordRevocation(_ id: UUID, _ json: String) -> SQLStatement {
        "UPDATE shares SET revocation_json = \(json) WHERE id = \(id) AND revocation_json IS NULL"
    }

    /// The shares in `state` whose end date has come at `now`; on PostgreSQL locked, skipping those another
    /// transaction is moving.
    static func due(_ state: ShareState, now: UnixMillis) -> SQLStatement {
        "SELECT * FROM shares WHERE state = \(state.rawValue) AND expires_at IS NOT NULL AND expires_at <= \(now)\(forUpdate: .skipLocked)"
    }

    /// A pending share whose date passed before approval can no longer be approved: it is closed.
    static func rejectUnapproved(_ id: UUID, now: UnixMillis) -> SQLStatement {
        "UPDATE shares SET state = 'rejected', reason = \(AuditEvent.expiredBeforeApproval), updated_at = \(now) WHERE id = \(id)"
    }

    static func expire(_ id: UUID, now: UnixMillis) -> SQLStatement {
        "UPDATE shares SET state = 'expired', updated_at = \(now) WHERE id = \(id) AND state = 'active'"
    }

    static let maxApprovalSequence: SQLStatement = "SELECT MAX(approval_sequence) AS value FROM shares"
    static let userApprovals: SQLStatement = "SELECT approval AS value FROM users WHERE approval IS NOT NULL"
}

/// The reads of tresors and shares and their single-statement writes, written once over either engine's
/// `SQLStore`. A read outside a transaction sees the last commit.
protocol SQLShareStore: ShareRepository, SQLStore {}

extension SQLShareStore {
    public func tresor(id: UUID) async throws -> TresorRow? { try await row(TresorRow.self, ShareSQL.tresor(id)) }
    public func tresors(ownerID: UUID) async throws -> [TresorRow] { try await rows(TresorRow.self, ShareSQL.tresors(ownerID: ownerID)) }
    public func share(id: UUID) async throws -> ShareRow? { try await row(ShareRow.self, ShareSQL.share(id)) }
    public func shares(patientID: UUID) async throws -> [ShareRow] { try await rows(ShareRow.self, ShareSQL.shares(patientID: patientID)) }
    public func shares(doctorID: UUID) async throws -> [ShareRow] { try await rows(ShareRow.self, ShareSQL.shares(doctorID: doctorID)) }
    public func shares(state: ShareState) async throws -> [ShareRow] { try await rows(ShareRow.self, ShareSQL.shares(state: state)) }

    public func activeShares(doctorID: UUID, now: UnixMillis) async throws -> [ShareRow] {
        try await rows(ShareRow.self, ShareSQL.activeShares(doctorID: doctorID, now: now))
    }

    public func shares(doctorID: UUID, patientID: UUID) async throws -> [ShareRow] {
        try await rows(ShareRow.self, ShareSQL.shares(doctorID: doctorID, patientID: patientID))
    }

    public func activeShare(doctorID: UUID, patientID: UUID, tresorID: UUID, now: UnixMillis) async throws -> ShareRow? {
        try await row(ShareRow.self, ShareSQL.activeShare(doctorID: doctorID, patientID: patientID, tresorID: tresorID, now: now))
    }

    public func insertShare(_ s: ShareRow, audit: AuditEvent) async throws {
        let insert = ShareSQL.insertShare(s, grant: try RowJSON.encode(s.grant))
        try await execute(insert, audit: [audit], now: s.createdAt, conflict: ShareRow.openShareExists)
    }

    public func recordRevocation(id: UUID, revocation: ShareRevocation) async throws {
        try await execute(ShareSQL.recordRevocation(id, try RowJSON.encode(revocation)))
    }

    public func maxApprovalSequence() async throws -> UInt64 {
        let shares = try await row(StoredNumber.self, ShareSQL.maxApprovalSequence)?.value ?? 0
        let users = try await rows(StoredText.self, ShareSQL.userApprovals).map(\.value)
        return max(UInt64(bitPattern: shares), RowJSON.maxApprovalSequence(users))
    }
}
