import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// Tresors and the share lifecycle (Docs/design.md §3). Changes lock the row first, then check the
/// state machine, so concurrent server instances agree.
extension PostgresRepository {
    public func upsertTresor(_ t: TresorRow, audit: AuditEvent) async throws -> TresorRow {
        let grant = try RowJSON.encode(t.selfGrant)
        return try await transaction(conflict: "tresor was created concurrently; retry") { conn in
            if let existing = try await self.all(TresorRow.self, "SELECT * FROM tresors WHERE id = \(t.id) FOR UPDATE", on: conn).first {
                if try TresorRow.unchanged(existing, proposed: t) { return existing }
                try await conn.query(
                    """
                    UPDATE tresors SET current_epoch = \(Int64(t.currentEpoch)), self_grant = \(grant), updated_at = \(t.updatedAt)
                    WHERE id = \(t.id)
                    """,
                    logger: self.logger
                )
            } else {
                try await conn.query(
                    """
                    INSERT INTO tresors (id, owner_id, category, current_epoch, self_grant, updated_at)
                    VALUES (\(t.id), \(t.ownerID), \(t.category), \(Int64(t.currentEpoch)), \(grant), \(t.updatedAt))
                    """,
                    logger: self.logger
                )
            }
            try await self.appendAudit(conn, [audit], now: t.updatedAt)
            return t
        }
    }

    public func tresor(id: UUID) async throws -> TresorRow? {
        try await all(TresorRow.self, "SELECT * FROM tresors WHERE id = \(id)").first
    }

    public func tresors(ownerID: UUID) async throws -> [TresorRow] {
        try await all(TresorRow.self, "SELECT * FROM tresors WHERE owner_id = \(ownerID) ORDER BY category")
    }

    public func insertShare(_ s: ShareRow, audit: AuditEvent) async throws {
        let grant = try RowJSON.encode(s.grant)
        try await transaction(conflict: ShareRow.openShareExists) { conn in
            try await conn.query(
                """
                INSERT INTO shares (id, patient_id, doctor_id, tresor_id, category, state, grant_json, created_at, updated_at, expires_at)
                VALUES (\(s.id), \(s.patientID), \(s.doctorID), \(s.tresorID), \(s.category), \(s.state.rawValue), \(grant), \(s.createdAt),
                        \(s.updatedAt), \(s.expiresAt))
                """,
                logger: self.logger
            )
            try await self.appendAudit(conn, [audit], now: s.createdAt)
        }
    }

    public func share(id: UUID) async throws -> ShareRow? {
        try await all(ShareRow.self, "SELECT * FROM shares WHERE id = \(id)").first
    }

    public func shares(patientID: UUID) async throws -> [ShareRow] {
        try await all(ShareRow.self, "SELECT * FROM shares WHERE patient_id = \(patientID) ORDER BY created_at")
    }

    public func shares(doctorID: UUID) async throws -> [ShareRow] {
        try await all(ShareRow.self, "SELECT * FROM shares WHERE doctor_id = \(doctorID) ORDER BY created_at")
    }

    public func shares(state: ShareState) async throws -> [ShareRow] {
        try await all(ShareRow.self, "SELECT * FROM shares WHERE state = \(state.rawValue) ORDER BY created_at")
    }

    public func transitionShare(id: UUID, _ t: ShareTransition, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let appr = try t.approval.map(RowJSON.encode)
        return try await transaction { conn in
            let s = try await self.locked(ShareRow.self, conn, id)
            try t.check(s.state)
            try await conn.query(
                """
                UPDATE shares SET state = \(t.to.rawValue), approval = COALESCE(\(appr), approval),
                       approval_sequence = COALESCE(\(t.approval.map { Int64(bitPattern: $0.sequence) }), approval_sequence),
                       reason = COALESCE(\(t.reason), reason), updated_at = \(now)
                WHERE id = \(id)
                """,
                logger: self.logger
            )
            try await self.appendAudit(conn, [audit], now: now)
            return t.applied(to: s, at: now)
        }
    }

    public func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let g = try RowJSON.encode(grant)
        return try await transaction { conn in
            // A share whose end date passed is expired before the check, so the refusal names that state.
            _ = try await self.expireShares(conn, now: now)
            var s = try await self.locked(ShareRow.self, conn, id)
            try ShareTransition.grantUpdate.check(s.state)
            try await conn.query("UPDATE shares SET latest_grant = \(g), updated_at = \(now) WHERE id = \(id)", logger: self.logger)
            try await self.appendAudit(conn, [audit], now: now)
            s.latestGrant = grant
            s.updatedAt = now
            return s
        }
    }

    public func recordRevocation(id: UUID, revocation: ShareRevocation) async throws {
        let json = try RowJSON.encode(revocation)
        try await transaction { conn in
            try await conn.query("UPDATE shares SET revocation_json = \(json) WHERE id = \(id) AND revocation_json IS NULL", logger: self.logger)
        }
    }

    public func activeShares(doctorID: UUID, now: UnixMillis) async throws -> [ShareRow] {
        try await all(
            ShareRow.self,
            PostgresQuery(
                unsafeSQL: "SELECT * FROM shares WHERE doctor_id = $1 AND \(ShareRow.active(at: "$2")) ORDER BY created_at",
                binds: binds(doctorID, now)
            )
        )
    }

    public func expireShares(now: UnixMillis) async throws -> [ShareRow] {
        try await transaction { conn in try await self.expireShares(conn, now: now) }
    }

    /// `expireShares` inside the caller's transaction.
    func expireShares(_ conn: PostgresConnection, now: UnixMillis) async throws -> [ShareRow] {
        // A pending share whose date passed before approval can no longer be approved: close it.
        let stale = try await self.all(
            ShareRow.self,
            """
            SELECT * FROM shares WHERE state = 'pending' AND expires_at IS NOT NULL AND expires_at <= \(now) FOR UPDATE SKIP LOCKED
            """,
            on: conn
        )
        if !stale.isEmpty {
            try await conn.query(
                """
                UPDATE shares SET state = 'rejected', reason = \(AuditEvent.expiredBeforeApproval), updated_at = \(now)
                WHERE id = ANY(\(stale.map(\.id)))
                """,
                logger: self.logger
            )
            try await self.appendAudit(conn, stale.map(AuditEvent.shareExpiredBeforeApproval), now: now)
        }
        let due = try await self.all(
            ShareRow.self,
            """
            SELECT * FROM shares WHERE state = 'active' AND expires_at IS NOT NULL AND expires_at <= \(now) FOR UPDATE SKIP LOCKED
            """,
            on: conn
        )
        guard !due.isEmpty else { return [] }
        try await conn.query("UPDATE shares SET state = 'expired', updated_at = \(now) WHERE id = ANY(\(due.map(\.id)))", logger: self.logger)
        try await self.appendAudit(conn, due.map(AuditEvent.shareExpired), now: now)
        return due.map { $0.expired(at: now) }
    }

    public func maxApprovalSequence() async throws -> UInt64 {
        var shares: Int64 = 0
        for try await v in try await client.query("SELECT COALESCE(MAX(approval_sequence), 0) FROM shares", logger: logger).decode(Int64.self) {
            shares = v
        }
        var approvals: [String] = []
        for try await text in try await client.query("SELECT approval FROM users WHERE approval IS NOT NULL", logger: logger).decode(String.self) {
            approvals.append(text)
        }
        return max(UInt64(bitPattern: shares), RowJSON.maxApprovalSequence(approvals))
    }
}
