import Foundation
import GRDB
import VaultAPI
import VaultCore

/// Tresors and the share lifecycle (Docs/design.md §3).
extension SQLiteRepository {
    public func upsertTresor(_ t: TresorRow, audit: AuditEvent) async throws -> TresorRow {
        let grant = try RowJSON.encode(t.selfGrant)
        return try await pool.write { db in
            if let existing = try Self.one(TresorRow.self, db, "SELECT * FROM tresors WHERE id = ?", [Self.id(t.id)]) {
                if try TresorRow.unchanged(existing, proposed: t) { return existing }
                try db.execute(
                    sql: "UPDATE tresors SET current_epoch = ?, self_grant = ?, updated_at = ? WHERE id = ?",
                    arguments: [Int64(t.currentEpoch), grant, t.updatedAt, Self.id(t.id)]
                )
            } else {
                try db.execute(
                    sql: "INSERT INTO tresors (id, owner_id, category, current_epoch, self_grant, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    arguments: [Self.id(t.id), Self.id(t.ownerID), t.category, Int64(t.currentEpoch), grant, t.updatedAt]
                )
            }
            try Self.appendAudit(db, [audit], now: t.updatedAt)
            return t
        }
    }

    public func tresor(id: UUID) async throws -> TresorRow? {
        try await pool.read { db in try Self.one(TresorRow.self, db, "SELECT * FROM tresors WHERE id = ?", [Self.id(id)]) }
    }

    public func tresors(ownerID: UUID) async throws -> [TresorRow] {
        try await pool.read { db in
            try Self.all(TresorRow.self, db, "SELECT * FROM tresors WHERE owner_id = ? ORDER BY category", [Self.id(ownerID)])
        }
    }

    public func insertShare(_ s: ShareRow, audit: AuditEvent) async throws {
        let grant = try RowJSON.encode(s.grant)
        try await write(conflict: ShareRow.openShareExists) { db in
            try db.execute(
                sql: """
                    INSERT INTO shares (id, patient_id, doctor_id, tresor_id, category, state, grant_json, approval, approval_sequence, reason,
                                        created_at, updated_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, ?, ?, ?)
                    """,
                arguments: [
                    Self.id(s.id), Self.id(s.patientID), Self.id(s.doctorID), Self.id(s.tresorID), s.category, s.state.rawValue,
                    grant, s.createdAt, s.updatedAt, s.expiresAt,
                ]
            )
            try Self.appendAudit(db, [audit], now: s.createdAt)
        }
    }

    public func share(id: UUID) async throws -> ShareRow? {
        try await pool.read { db in try Self.one(ShareRow.self, db, "SELECT * FROM shares WHERE id = ?", [Self.id(id)]) }
    }

    public func shares(patientID: UUID) async throws -> [ShareRow] {
        try await shares(where: "patient_id = ?", Self.id(patientID))
    }

    public func shares(doctorID: UUID) async throws -> [ShareRow] {
        try await shares(where: "doctor_id = ?", Self.id(doctorID))
    }

    public func shares(state: ShareState) async throws -> [ShareRow] {
        try await shares(where: "state = ?", state.rawValue)
    }

    private func shares(where condition: String, _ value: String) async throws -> [ShareRow] {
        try await pool.read { db in try Self.all(ShareRow.self, db, "SELECT * FROM shares WHERE \(condition) ORDER BY created_at", [value]) }
    }

    public func transitionShare(id: UUID, _ t: ShareTransition, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let appr = try t.approval.map(RowJSON.encode)
        let sql = """
            UPDATE shares SET state = ?, approval = COALESCE(?, approval), approval_sequence = COALESCE(?, approval_sequence),
                   reason = COALESCE(?, reason), updated_at = ?
            WHERE id = ? AND state IN (\(Self.sqlList(t.from)))
            """
        let arguments: StatementArguments = [t.to.rawValue, appr, t.approval.map { Int64(bitPattern: $0.sequence) }, t.reason, now, Self.id(id)]
        return try await pool.write { db in
            try Self.transition(ShareRow.self, db, id: id, to: t.to.rawValue, sql, arguments, audit: audit, now: now)
        }
    }

    public func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let g = try RowJSON.encode(grant)
        let move = ShareTransition.grantUpdate
        let sql = "UPDATE shares SET latest_grant = ?, updated_at = ? WHERE id = ? AND state IN (\(Self.sqlList(move.from)))"
        return try await pool.write { db in
            // A share whose end date passed is expired before the check, so the refusal names that state.
            _ = try Self.expireShares(db, now: now)
            return try Self.transition(ShareRow.self, db, id: id, to: move.to.rawValue, sql, [g, now, Self.id(id)], audit: audit, now: now)
        }
    }

    public func recordRevocation(id: UUID, revocation: ShareRevocation) async throws {
        let json = try RowJSON.encode(revocation)
        try await pool.write { db in
            try db.execute(sql: "UPDATE shares SET revocation_json = ? WHERE id = ? AND revocation_json IS NULL", arguments: [json, Self.id(id)])
        }
    }

    public func activeShares(doctorID: UUID, now: UnixMillis) async throws -> [ShareRow] {
        try await pool.read { db in
            try Self.all(
                ShareRow.self,
                db,
                "SELECT * FROM shares WHERE doctor_id = ? AND \(ShareRow.active(at: "?")) ORDER BY created_at",
                [Self.id(doctorID), now]
            )
        }
    }

    public func expireShares(now: UnixMillis) async throws -> [ShareRow] {
        try await pool.write { db in try Self.expireShares(db, now: now) }
    }

    /// `expireShares` inside the caller's write transaction.
    static func expireShares(_ db: Database, now: UnixMillis) throws -> [ShareRow] {
        // A pending share whose date passed before approval can no longer be approved: close it.
        let stale = try Self.all(
            ShareRow.self,
            db,
            "SELECT * FROM shares WHERE state = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?",
            [now]
        )
        for s in stale {
            try db.execute(
                sql: "UPDATE shares SET state = 'rejected', reason = ?, updated_at = ? WHERE id = ?",
                arguments: [AuditEvent.expiredBeforeApproval, now, Self.id(s.id)]
            )
        }
        try Self.appendAudit(db, stale.map(AuditEvent.shareExpiredBeforeApproval), now: now)
        let due = try Self.all(
            ShareRow.self,
            db,
            "SELECT * FROM shares WHERE state = 'active' AND expires_at IS NOT NULL AND expires_at <= ?",
            [now]
        )
        guard !due.isEmpty else { return [] }
        for s in due {
            try db.execute(
                sql: "UPDATE shares SET state = 'expired', updated_at = ? WHERE id = ? AND state = 'active'",
                arguments: [now, Self.id(s.id)]
            )
        }
        try Self.appendAudit(db, due.map(AuditEvent.shareExpired), now: now)
        return due.map { $0.expired(at: now) }
    }

    public func maxApprovalSequence() async throws -> UInt64 {
        try await pool.read { db in
            let shares = try Int64.fetchOne(db, sql: "SELECT MAX(approval_sequence) FROM shares") ?? 0
            let users = try String.fetchAll(db, sql: "SELECT approval FROM users WHERE approval IS NOT NULL")
            return max(UInt64(bitPattern: shares), RowJSON.maxApprovalSequence(users))
        }
    }
}
