import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// Users and sessions (Docs/design.md §2).
extension PostgresRepository {
    public func insertUser(_ user: UserRow, audit: AuditEvent) async throws {
        let registration = try RowJSON.encode(user.registration)
        do {
            try await transaction { conn in
                try await conn.query(
                    """
                    INSERT INTO users (id, username, role, status, registration, created_at, updated_at)
                    VALUES (\(user.id), \(user.username), \(user.role.rawValue), \(user.status.rawValue), \(registration), \(user.createdAt),
                            \(user.updatedAt))
                    """,
                    logger: logger
                )
                try await appendAudit(conn, [audit], now: user.createdAt)
            }
        } catch  where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict("username or user id already registered")
        }
    }

    public func user(id: UUID) async throws -> UserRow? {
        try await all(UserRow.self, "SELECT * FROM users WHERE id = \(id)").first
    }

    public func user(username: String) async throws -> UserRow? {
        try await all(UserRow.self, "SELECT * FROM users WHERE username = \(username)").first
    }

    public func users() async throws -> [UserRow] {
        try await all(UserRow.self, "SELECT * FROM users ORDER BY created_at, username")
    }

    public func decideUser(
        id: UUID,
        status: AccountStatus,
        certificate: Certificate?,
        approval: Approval?,
        reason: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws -> UserRow {
        let cert = try certificate.map(RowJSON.encode)
        let appr = try approval.map(RowJSON.encode)
        return try await transaction { conn in
            guard var user = try await self.all(UserRow.self, "SELECT * FROM users WHERE id = \(id) FOR UPDATE", on: conn).first else {
                throw RepositoryError.notFound("user")
            }
            guard user.status == .pending else { throw RepositoryError.invalidTransition(from: user.status.rawValue, to: status.rawValue) }
            try await conn.query(
                """
                UPDATE users SET status = \(status.rawValue), certificate = \(cert), approval = \(appr), reject_reason = \(reason),
                       updated_at = \(now)
                WHERE id = \(id)
                """,
                logger: logger
            )
            try await self.appendAudit(conn, [audit], now: now)
            user.status = status
            user.certificate = certificate
            user.approval = approval
            user.rejectReason = reason
            user.updatedAt = now
            return user
        }
    }

    public func insertSession(_ s: SessionRow) async throws {
        try await client.query("DELETE FROM sessions WHERE expires_at <= \(s.createdAt)", logger: logger)
        try await client.query(
            """
            INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES (\(s.tokenHash), \(s.userID), \(s.createdAt), \(s.expiresAt))
            """,
            logger: logger
        )
    }

    public func session(tokenHash: String) async throws -> SessionRow? {
        try await all(SessionRow.self, "SELECT token_hash, user_id, created_at, expires_at FROM sessions WHERE token_hash = \(tokenHash)").first
    }

    public func deleteSession(tokenHash: String) async throws {
        try await client.query("DELETE FROM sessions WHERE token_hash = \(tokenHash)", logger: logger)
    }
}
