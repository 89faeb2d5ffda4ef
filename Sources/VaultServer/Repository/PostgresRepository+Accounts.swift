import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// Users and sessions (Docs/design.md §2): the statements are `AccountSQL`'s and the reads and
/// single-statement writes `SQLAccountStore`'s.
extension PostgresRepository: SQLAccountStore {
    public func decideUser(id: UUID, _ d: UserDecision, now: UnixMillis, audit: AuditEvent) async throws -> UserRow {
        let cert = try d.certificate.map(RowJSON.encode)
        let appr = try d.approval.map(RowJSON.encode)
        return try await transaction { conn in
            let user = try await self.locked(UserRow.self, conn, id)
            try d.check(user)
            try await PostgresSQL(connection: conn, logger: self.logger).execute(
                AccountSQL.decide(id, d, certificate: cert, approval: appr, now: now)
            )
            try await self.appendAudit(conn, [audit], now: now)
            return d.applied(to: user, at: now)
        }
    }

}

/// The account lifecycle (Docs/design.md §2): password changes, recovery, sessions, suspension, deletion.
extension PostgresRepository {
    /// Writes columns of the account's credentials row, creating the row when needed.
    func upsertCredentials(_ conn: PostgresConnection, userID: UUID, columns: [(String, String?)], now: UnixMillis) async throws {
        let sql = PostgresSQL(connection: conn, logger: logger)
        try await sql.execute(AccountSQL.ensureCredentials(userID, now: now))
        for (column, value) in columns { try await sql.execute(AccountSQL.setCredential(userID, column: column, value, now: now)) }
    }

    public func setRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis) async throws {
        let bundle = try RowJSON.encode(enrollment.bundle)
        try await transaction { conn in
            try await self.upsertCredentials(
                conn,
                userID: userID,
                columns: [("recovery_bundle", bundle), ("recovery_verifier", enrollment.verifier)],
                now: now
            )
        }
    }

    public func replaceRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis, audit: AuditEvent) async throws {
        let bundle = try RowJSON.encode(enrollment.bundle)
        try await transaction { conn in
            var exists = false
            for try await _ in try await conn.query("SELECT 1 FROM users WHERE id = \(userID) FOR NO KEY UPDATE", logger: logger) { exists = true }
            guard exists else { throw RepositoryError.notFound("user") }
            try await self.upsertCredentials(
                conn,
                userID: userID,
                columns: [("recovery_bundle", bundle), ("recovery_verifier", enrollment.verifier)],
                now: now
            )
            try await self.appendAudit(conn, [audit], now: now)
        }
    }

    public func updateCredentials(
        userID: UUID,
        _ update: CredentialUpdate,
        expecting generation: Int64,
        keeping tokenHash: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws {
        try await transaction { conn in
            try await self.changeCredentials(conn, userID: userID, update, expecting: generation, keeping: tokenHash, now: now, audit: audit)
        }
    }

    /// A credential change's statements in the caller's transaction (`updateCredentials`). The account's row
    /// is locked first: a login opening a session waits for the change, or the change for the login.
    func changeCredentials(
        _ conn: PostgresConnection,
        userID: UUID,
        _ update: CredentialUpdate,
        expecting generation: Int64,
        keeping tokenHash: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws {
        var current: Int64?
        for try await g in try await conn.query("SELECT credential_generation FROM users WHERE id = \(userID) FOR NO KEY UPDATE", logger: logger)
            .decode(Int64.self)
        { current = g }
        guard let current else { throw RepositoryError.notFound("user") }
        guard current == generation else { throw CredentialChangeRefused.changedMeanwhile }
        for try await stored in try await conn.query("SELECT credential_update FROM account_credentials WHERE user_id = \(userID)", logger: logger)
            .decode(String?.self)
        {
            if let stored = try RowJSON.decodeOptional(CredentialUpdate.self, stored), update.changedAt <= stored.changedAt {
                throw CredentialChangeRefused.notNewer(stored: stored.changedAt)
            }
        }
        let next = try StoredNumberOutOfRange.successor(of: generation, "the credential generation")
        try await conn.query("UPDATE users SET credential_generation = \(next), updated_at = \(now) WHERE id = \(userID)", logger: logger)
        try await upsertCredentials(conn, userID: userID, columns: [("credential_update", try RowJSON.encode(update))], now: now)
        if let tokenHash {
            _ = try await deleteSessions(conn, userID: userID, .allExcept(tokenHash: tokenHash))
            try await conn.query(
                "UPDATE sessions SET credential_generation = \(next) WHERE user_id = \(userID) AND token_hash = \(tokenHash)",
                logger: logger
            )
        } else {
            _ = try await deleteSessions(conn, userID: userID, .all)
        }
        try await appendAudit(conn, [audit], now: now)
    }

    public func openSession(_ o: SessionOpening, now: UnixMillis) async throws {
        // Other accounts' expired sessions go outside the transaction, which locks only this account's rows;
        // rows another transaction holds are left for later rather than waited for (no deadlock with it).
        try await client.query(
            """
            DELETE FROM sessions WHERE token_hash IN (SELECT token_hash FROM sessions WHERE expires_at <= \(now) FOR UPDATE SKIP LOCKED)
            """,
            logger: logger
        )
        try await transaction { conn in try await self.openSession(conn, o, now: now) }
    }

    /// A session's opening in the caller's transaction (`openSession`). The account's row is locked before
    /// it is checked: a credential change, suspension or deletion committing meanwhile is seen, and one
    /// starting meanwhile waits and then ends this session with the others. (`NO KEY`: rows that merely
    /// reference the account, a share or a tresor being made, need not wait.)
    func openSession(_ conn: PostgresConnection, _ o: SessionOpening, now: UnixMillis) async throws {
        let id = o.session.userID
        var account: (String, Int64?, Int64)?
        for try await row in try await conn.query(
            "SELECT status, suspended_at, credential_generation FROM users WHERE id = \(id) FOR NO KEY UPDATE",
            logger: logger
        ).decode((String, Int64?, Int64).self) { account = row }
        guard let (status, suspendedAt, generation) = account, status == AccountStatus.active.rawValue else { throw SessionRefused.notActive }
        guard suspendedAt == nil else { throw SessionRefused.suspended }
        guard generation == o.generation else { throw SessionRefused.credentialsChanged }
        try await conn.query("DELETE FROM sessions WHERE user_id = \(id) AND expires_at <= \(now)", logger: logger)
        // The cap: the newest `maxSessions - 1` stay beside the new one.
        try await conn.query(
            """
            DELETE FROM sessions WHERE token_hash IN (
                SELECT token_hash FROM sessions WHERE user_id = \(id) ORDER BY created_at DESC, token_hash DESC OFFSET \(Int64(max(0, o.maxSessions - 1))))
            """,
            logger: logger
        )
        try await conn.query(
            """
            INSERT INTO sessions (token_hash, user_id, created_at, expires_at, device_name, credential_generation)
            VALUES (\(o.session.tokenHash), \(id), \(o.session.createdAt), \(o.session.expiresAt), \(o.deviceName), \(o.generation))
            """,
            logger: logger
        )
        guard let audit = o.audit else { return }
        if let mark = o.auditMark {
            // A mark still live means a login like this one was audited within the interval: no second entry.
            var marked = false
            for try await _ in try await conn.query(
                """
                INSERT INTO login_throttle AS t (key, failures, last_failure, expires_at) VALUES (\(mark.key), 0, \(now), \(mark.until))
                ON CONFLICT (key) DO UPDATE SET failures = 0, last_failure = EXCLUDED.last_failure, expires_at = EXCLUDED.expires_at
                WHERE t.expires_at <= \(now)
                RETURNING 1
                """,
                logger: logger
            ) { marked = true }
            if !marked { return }
        }
        try await appendAudit(conn, [audit], now: now)
    }

    public func deleteSessions(userID: UUID, _ selection: SessionSelection) async throws -> Int {
        try await transaction { conn in try await self.deleteSessions(conn, userID: userID, selection) }
    }

    func deleteSessions(_ conn: PostgresConnection, userID: UUID, _ selection: SessionSelection) async throws -> Int {
        try await PostgresSQL(connection: conn, logger: logger).rows(StoredText.self, AccountSQL.deleteSessions(userID, selection)).count
    }

    public func setSuspension(userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) async throws {
        try await transaction { conn in try await self.setSuspension(conn, userID: userID, reason: reason, now: now, audit: audit) }
    }

    /// A suspension's (or reinstatement's) statements in the caller's transaction (`setSuspension`).
    func setSuspension(_ conn: PostgresConnection, userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) async throws {
        let found = try await PostgresSQL(connection: conn, logger: logger).rows(
            StoredText.self,
            AccountSQL.suspend(userID, reason: reason, now: now)
        )
        guard found.count == 1 else { throw RepositoryError.notFound("user") }
        if reason != nil { _ = try await deleteSessions(conn, userID: userID, .all) }
        try await appendAudit(conn, [audit], now: now)
    }

    public func deleteAccount(userID: UUID, now: UnixMillis, audit: AuditEvent) async throws -> DeletedAccount {
        try await transaction { conn in
            // The account's row first: a second deletion at the same time waits here, then finds it gone.
            var exists = false
            for try await _ in try await conn.query("SELECT 1 FROM users WHERE id = \(userID) FOR UPDATE", logger: logger) { exists = true }
            guard exists else { throw RepositoryError.notFound("account") }
            // The owner's sequence row is what pushes lock: holding it orders a concurrent push before or after.
            // Inserted first when missing, so a first push still in flight (its row not yet committed) is
            // waited for, and its versions deleted, instead of committing after the deletion's reads.
            try await conn.query(
                "INSERT INTO owner_sequences (owner_id, last_sequence) VALUES (\(userID), 0) ON CONFLICT DO NOTHING",
                logger: logger
            )
            try await conn.query("SELECT 1 FROM owner_sequences WHERE owner_id = \(userID) FOR UPDATE", logger: logger)
            let sql = PostgresSQL(connection: conn, logger: self.logger)
            let deleted =
                try await sql.row(DeletedAccount.self, AccountSQL.deletedCounts(userID)) ?? DeletedAccount(versions: 0, tresors: 0, shares: 0)
            for statement in AccountSQL.deleteAccount(userID) { try await sql.execute(statement) }
            try await self.appendAudit(conn, [audit], now: now)
            return deleted
        }
    }
}

/// The login back-off table (Docs/design.md §2), shared by every instance on the database.
extension PostgresRepository {
    public func loginThrottle(keys: [String], now: UnixMillis) async throws -> [LoginThrottleRow] {
        let rows = try await client.query(
            "SELECT key, failures, last_failure, expires_at FROM login_throttle WHERE key = ANY(\(keys)) AND expires_at > \(now)",
            logger: logger
        )
        var out: [LoginThrottleRow] = []
        for try await (key, failures, last, expires) in rows.decode((String, Int64, Int64, Int64).self) {
            out.append(LoginThrottleRow(key: key, failures: failures, lastFailure: last, expiresAt: expires))
        }
        return out
    }

    public func updateLoginThrottle<T: Sendable>(
        keys: [String],
        now: UnixMillis,
        _ decide: @Sendable ([LoginThrottleRow]) -> (writes: [LoginThrottleRow], result: T)
    ) async throws -> T {
        // Expired rows go first, skipping any another transaction holds (waiting for them could deadlock with it).
        try await client.query(
            "DELETE FROM login_throttle WHERE key IN (SELECT key FROM login_throttle WHERE expires_at <= \(now) FOR UPDATE SKIP LOCKED)",
            logger: logger
        )
        // Every key's row exists (an expired placeholder when new) and is locked in key order before it is
        // read: attempts racing on one key are decided one after another, and two requests never wait for
        // each other's keys in opposite orders.
        let sorted = Array(Set(keys)).sorted()
        return try await transaction { conn in
            for key in sorted {
                try await conn.query(
                    "INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (\(key), 0, 0, 0) ON CONFLICT (key) DO NOTHING",
                    logger: logger
                )
            }
            var rows: [LoginThrottleRow] = []
            for try await (key, failures, last, expires) in try await conn.query(
                "SELECT key, failures, last_failure, expires_at FROM login_throttle WHERE key = ANY(\(sorted)) ORDER BY key FOR UPDATE",
                logger: logger
            ).decode((String, Int64, Int64, Int64).self) where expires > now {
                rows.append(LoginThrottleRow(key: key, failures: failures, lastFailure: last, expiresAt: expires))
            }
            let (writes, result) = decide(rows)
            for w in writes {
                try await conn.query(
                    """
                    INSERT INTO login_throttle (key, failures, last_failure, expires_at) VALUES (\(w.key), \(w.failures), \(w.lastFailure), \(w.expiresAt))
                    ON CONFLICT (key) DO UPDATE SET
                        failures = EXCLUDED.failures, last_failure = EXCLUDED.last_failure, expires_at = EXCLUDED.expires_at
                    """,
                    logger: logger
                )
            }
            return result
        }
    }
}
