import Foundation
import Logging
import NIOCore
import PostgresNIO
import VaultAPI
import VaultCore
import VaultCrypto

/// The production backend: PostgreSQL through a pooled postgres-nio client. Stateless apart from the
/// database, so several server instances can share one PostgreSQL. Each owner's pushes take that
/// owner's row lock in `owner_sequences`, so change sequences commit in order and a cursor never skips.
public final class PostgresRepository: VaultRepository {
    public let backendName = "postgres"
    let client: PostgresClient
    let logger: Logger

    /// Wraps a client; the client must be running (`client.run()`, or as a service of the application).
    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Parses `postgres://user:password@host:port/database` into a client configuration.
    public static func configuration(url text: String) throws -> PostgresClient.Configuration {
        guard let url = URLComponents(string: text), url.scheme == "postgres" || url.scheme == "postgresql",
              let host = url.host, !host.isEmpty, let user = url.user, !user.isEmpty
        else { throw ConfigurationError.invalid("database URL must look like postgres://user:password@host:port/database") }
        let database = url.path.hasPrefix("/") ? String(url.path.dropFirst()) : url.path
        var config = PostgresClient.Configuration(host: host, port: url.port ?? 5432, username: user, password: url.password,
                                                  database: database.isEmpty ? nil : database, tls: .disable)
        config.options.maximumConnections = 16
        config.options.minimumConnections = 0
        return config
    }

    // MARK: Schema

    static let migrations: [(String, String)] = [
        ("v1-initial", """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
        CREATE TABLE users (
            id UUID PRIMARY KEY,
            username TEXT NOT NULL UNIQUE,
            role TEXT NOT NULL CHECK (role IN ('patient', 'doctor')),
            status TEXT NOT NULL CHECK (status IN ('pending', 'active', 'rejected')),
            registration TEXT NOT NULL,
            certificate TEXT,
            approval TEXT,
            reject_reason TEXT,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL);
        CREATE TABLE sessions (
            token_hash TEXT PRIMARY KEY,
            user_id UUID NOT NULL REFERENCES users(id),
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL);
        CREATE TABLE tresors (
            id UUID PRIMARY KEY,
            owner_id UUID NOT NULL REFERENCES users(id),
            category TEXT NOT NULL,
            current_epoch BIGINT NOT NULL CHECK (current_epoch >= 1),
            self_grant TEXT NOT NULL,
            updated_at BIGINT NOT NULL,
            UNIQUE (owner_id, category));
        CREATE TABLE shares (
            id UUID PRIMARY KEY,
            patient_id UUID NOT NULL REFERENCES users(id),
            doctor_id UUID NOT NULL REFERENCES users(id),
            tresor_id UUID NOT NULL REFERENCES tresors(id),
            category TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN (\(Schema.shareStates))),
            grant_json TEXT NOT NULL,
            latest_grant TEXT,
            approval TEXT,
            approval_sequence BIGINT,
            reason TEXT,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            expires_at BIGINT);
        CREATE UNIQUE INDEX shares_open ON shares (patient_id, doctor_id, tresor_id) WHERE state IN ('pending', 'active');
        CREATE INDEX shares_doctor ON shares (doctor_id, state);
        CREATE INDEX shares_patient ON shares (patient_id);
        CREATE TABLE owner_sequences (owner_id UUID PRIMARY KEY, last_sequence BIGINT NOT NULL);
        CREATE TABLE versions (
            version_id TEXT PRIMARY KEY,
            owner_id UUID NOT NULL,
            record_id TEXT NOT NULL,
            tresor_id UUID NOT NULL,
            epoch BIGINT NOT NULL,
            hlc_physical BIGINT NOT NULL,
            hlc_counter BIGINT NOT NULL,
            hlc_device TEXT NOT NULL,
            deleted BOOLEAN NOT NULL,
            envelope BYTEA NOT NULL);
        CREATE TABLE heads (
            owner_id UUID NOT NULL,
            record_id TEXT NOT NULL,
            tresor_id UUID NOT NULL,
            version_id TEXT NOT NULL REFERENCES versions(version_id),
            hlc_physical BIGINT NOT NULL,
            hlc_counter BIGINT NOT NULL,
            hlc_device TEXT NOT NULL,
            deleted BOOLEAN NOT NULL,
            sequence BIGINT NOT NULL,
            changed_at BIGINT NOT NULL,
            PRIMARY KEY (owner_id, record_id));
        CREATE UNIQUE INDEX heads_sequence ON heads (owner_id, sequence);
        CREATE INDEX heads_tresor_sequence ON heads (owner_id, tresor_id, sequence);
        CREATE TABLE audit_log (
            sequence BIGINT PRIMARY KEY,
            at BIGINT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            patient_id UUID,
            details TEXT NOT NULL,
            previous_hash TEXT NOT NULL,
            hash TEXT NOT NULL);
        CREATE INDEX audit_patient ON audit_log (patient_id, sequence);
        CREATE TABLE audit_head (id INT PRIMARY KEY CHECK (id = 1), sequence BIGINT NOT NULL, hash TEXT NOT NULL);
        INSERT INTO audit_head (id, sequence, hash) VALUES (1, 0, '\(AuditChain.genesis)');
        CREATE TABLE admin_signatures (signature TEXT PRIMARY KEY, seen_at BIGINT NOT NULL);
        CREATE INDEX admin_signatures_seen ON admin_signatures (seen_at);
        CREATE FUNCTION carevault_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$;
        CREATE TRIGGER versions_append_only BEFORE UPDATE OR DELETE ON versions FOR EACH ROW EXECUTE FUNCTION carevault_append_only();
        CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_log FOR EACH ROW EXECUTE FUNCTION carevault_append_only();
        """),
    ]

    public func migrate() async throws {
        try await transaction { conn in
            // One instance migrates at a time; the others wait here and then find nothing to do.
            try await conn.query("SELECT pg_advisory_xact_lock(7262737)", logger: logger)
            try await conn.query("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)", logger: logger)
            var applied = Set<String>()
            for try await name in try await conn.query("SELECT name FROM schema_migrations", logger: logger).decode(String.self) { applied.insert(name) }
            for (name, sql) in Self.migrations where !applied.contains(name) {
                // The extended protocol takes one statement at a time.
                for statement in Self.statements(sql) {
                    try await conn.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await conn.query("INSERT INTO schema_migrations (name, applied_at) VALUES (\(name), \(Date().unixMillis))", logger: logger)
            }
            let secret = ByteBuffer(bytes: RandomBytes.bytes(count: 32))
            try await conn.query("INSERT INTO meta (key, value) VALUES ('server_secret', \(secret)) ON CONFLICT (key) DO NOTHING", logger: logger)
        }
    }

    /// Splits a migration into statements at semicolons that end a line (function bodies keep theirs
    /// inside the line).
    static func statements(_ sql: String) -> [String] {
        sql.components(separatedBy: ";\n").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .map { $0.hasSuffix(";") ? String($0.dropLast()) : $0 }.filter { !$0.isEmpty }
    }

    public func serverSecret() async throws -> [UInt8] {
        for try await value in try await client.query("SELECT value FROM meta WHERE key = 'server_secret'", logger: logger).decode(ByteBuffer.self) {
            return Array(value.readableBytesView)
        }
        throw RepositoryError.notFound("server secret (database not migrated)")
    }

    public func ping() async throws {
        try await client.query("SELECT 1", logger: logger)
    }

    /// Runs raw SQL outside the repository's rules: for maintenance, and for tests that play an attacker
    /// with write access to the database.
    public func executeRawSQL(_ sql: String) async throws {
        for statement in sql.components(separatedBy: ";").map({ $0.trimmingCharacters(in: .whitespacesAndNewlines) }) where !statement.isEmpty {
            try await client.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
    }

    static func isUniqueViolation(_ error: Error) -> Bool {
        (error as? PSQLError)?.serverInfo?[.sqlState] == "23505"
    }

    /// Runs `body` in a transaction and reports the error the body threw (postgres-nio wraps it), so both
    /// backends throw the same `RepositoryError`s.
    private func transaction<R: Sendable>(_ body: (PostgresConnection) async throws -> R) async throws -> R {
        do {
            return try await client.withTransaction(logger: logger) { conn in try await body(conn) }
        } catch let e as PostgresTransactionError {
            if let inner = e.closureError { throw inner }
            if let begin = e.beginError { throw begin }
            throw RepositoryError.unavailable("transaction failed: \(e.commitError.map { "\(type(of: $0))" } ?? "unknown")")
        }
    }

    // MARK: Audit helper (inside a transaction)

    private func appendAudit(_ conn: PostgresConnection, _ events: [AuditEvent], now: UnixMillis) async throws {
        guard !events.isEmpty else { return }
        // The head row's lock orders concurrent appenders; after waiting, READ COMMITTED re-reads the row.
        var head: (UInt64, String)?
        for try await (seq, hash) in try await conn.query("SELECT sequence, hash FROM audit_head WHERE id = 1 FOR UPDATE", logger: logger)
            .decode((Int64, String).self) { head = (UInt64(seq), hash) }
        guard let head else { throw RepositoryError.notFound("audit head") }
        let entries = AuditBuilder.entries(for: events, after: (head.0, head.1), now: now)
        for e in entries {
            let details = try RowJSON.encode(e.details)
            try await conn.query("""
                INSERT INTO audit_log (sequence, at, actor, action, patient_id, details, previous_hash, hash)
                VALUES (\(Int64(e.sequence)), \(e.at), \(e.actor), \(e.action), \(e.patientID), \(details), \(e.previousHash), \(e.hash))
                """, logger: logger)
        }
        let last = entries.last!
        try await conn.query("UPDATE audit_head SET sequence = \(Int64(last.sequence)), hash = \(last.hash) WHERE id = 1", logger: logger)
    }

    // MARK: Users and sessions

    static let userColumns = "id, username, role, status, registration, certificate, approval, reject_reason, created_at, updated_at"
    typealias UserTuple = (UUID, String, String, String, String, String?, String?, String?, Int64, Int64)

    static func userRow(_ t: UserTuple) throws -> UserRow {
        UserRow(id: t.0, username: t.1, role: Role(rawValue: t.2) ?? .patient, status: AccountStatus(rawValue: t.3) ?? .pending,
                registration: try RowJSON.decode(RegistrationRequest.self, t.4), certificate: try RowJSON.decodeOptional(Certificate.self, t.5),
                approval: try RowJSON.decodeOptional(Approval.self, t.6), rejectReason: t.7, createdAt: t.8, updatedAt: t.9)
    }

    private func users(_ query: PostgresQuery, on conn: PostgresConnection? = nil) async throws -> [UserRow] {
        let rows = if let conn { try await conn.query(query, logger: logger) } else { try await client.query(query, logger: logger) }
        var out: [UserRow] = []
        for try await t in rows.decode(UserTuple.self) { out.append(try Self.userRow(t)) }
        return out
    }

    public func insertUser(_ user: UserRow, audit: AuditEvent) async throws {
        let registration = try RowJSON.encode(user.registration)
        do {
            try await transaction { conn in
                try await conn.query("""
                    INSERT INTO users (id, username, role, status, registration, created_at, updated_at)
                    VALUES (\(user.id), \(user.username), \(user.role.rawValue), \(user.status.rawValue), \(registration), \(user.createdAt), \(user.updatedAt))
                    """, logger: logger)
                try await appendAudit(conn, [audit], now: user.createdAt)
            }
        } catch where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict("username or user id already registered")
        }
    }

    public func user(id: UUID) async throws -> UserRow? {
        try await users(PostgresQuery(unsafeSQL: "SELECT \(Self.userColumns) FROM users WHERE id = $1", binds: binds(id))).first
    }

    public func user(username: String) async throws -> UserRow? {
        try await users(PostgresQuery(unsafeSQL: "SELECT \(Self.userColumns) FROM users WHERE username = $1", binds: binds(username))).first
    }

    public func users() async throws -> [UserRow] {
        try await users(PostgresQuery(unsafeSQL: "SELECT \(Self.userColumns) FROM users ORDER BY created_at, username"))
    }

    public func decideUser(id: UUID, status: AccountStatus, certificate: Certificate?, approval: Approval?, reason: String?,
                           now: UnixMillis, audit: AuditEvent) async throws -> UserRow {
        let cert = try certificate.map(RowJSON.encode), appr = try approval.map(RowJSON.encode)
        return try await transaction { conn in
            let current = try await self.users(PostgresQuery(unsafeSQL: "SELECT \(Self.userColumns) FROM users WHERE id = $1 FOR UPDATE", binds: binds(id)), on: conn).first
            guard let current else { throw RepositoryError.notFound("user") }
            guard current.status == .pending else { throw RepositoryError.invalidTransition(from: current.status.rawValue, to: status.rawValue) }
            try await conn.query("""
                UPDATE users SET status = \(status.rawValue), certificate = \(cert), approval = \(appr), reject_reason = \(reason), updated_at = \(now)
                WHERE id = \(id)
                """, logger: logger)
            try await self.appendAudit(conn, [audit], now: now)
            var updated = current
            updated.status = status; updated.certificate = certificate; updated.approval = approval; updated.rejectReason = reason; updated.updatedAt = now
            return updated
        }
    }

    public func insertSession(_ s: SessionRow) async throws {
        try await client.query("DELETE FROM sessions WHERE expires_at <= \(s.createdAt)", logger: logger)
        try await client.query("""
            INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES (\(s.tokenHash), \(s.userID), \(s.createdAt), \(s.expiresAt))
            """, logger: logger)
    }

    public func session(tokenHash: String) async throws -> SessionRow? {
        for try await (h, u, c, e) in try await client.query("SELECT token_hash, user_id, created_at, expires_at FROM sessions WHERE token_hash = \(tokenHash)",
                                                              logger: logger).decode((String, UUID, Int64, Int64).self) {
            return SessionRow(tokenHash: h, userID: u, createdAt: c, expiresAt: e)
        }
        return nil
    }

    public func deleteSession(tokenHash: String) async throws {
        try await client.query("DELETE FROM sessions WHERE token_hash = \(tokenHash)", logger: logger)
    }

    // MARK: Tresors and shares

    typealias TresorTuple = (UUID, UUID, String, Int64, String, Int64)
    static let tresorColumns = "id, owner_id, category, current_epoch, self_grant, updated_at"

    static func tresorRow(_ t: TresorTuple) throws -> TresorRow {
        TresorRow(id: t.0, ownerID: t.1, category: t.2, currentEpoch: UInt32(t.3), selfGrant: try RowJSON.decode(Grant.self, t.4), updatedAt: t.5)
    }

    private func tresors(_ query: PostgresQuery, on conn: PostgresConnection? = nil) async throws -> [TresorRow] {
        let rows = if let conn { try await conn.query(query, logger: logger) } else { try await client.query(query, logger: logger) }
        var out: [TresorRow] = []
        for try await t in rows.decode(TresorTuple.self) { out.append(try Self.tresorRow(t)) }
        return out
    }

    public func upsertTresor(_ t: TresorRow, audit: AuditEvent) async throws -> TresorRow {
        let grant = try RowJSON.encode(t.selfGrant)
        do {
            return try await transaction { conn in
                let existing = try await self.tresors(PostgresQuery(unsafeSQL: "SELECT \(Self.tresorColumns) FROM tresors WHERE id = $1 FOR UPDATE",
                                                                    binds: binds(t.id)), on: conn).first
                if let existing {
                    guard existing.ownerID == t.ownerID, existing.category == t.category else {
                        throw RepositoryError.conflict("tresor belongs to another owner or category")
                    }
                    guard t.currentEpoch >= existing.currentEpoch else { throw RepositoryError.conflict("tresor is already at epoch \(existing.currentEpoch)") }
                    if t.currentEpoch == existing.currentEpoch {
                    // Another device declared this epoch already: with other keys that is a conflict the client resolves.
                    guard t.selfGrant == existing.selfGrant else { throw RepositoryError.conflict("tresor epoch \(t.currentEpoch) is already declared with other keys") }
                    return existing
                }
                    try await conn.query("""
                        UPDATE tresors SET current_epoch = \(Int64(t.currentEpoch)), self_grant = \(grant), updated_at = \(t.updatedAt) WHERE id = \(t.id)
                        """, logger: self.logger)
                } else {
                    try await conn.query("""
                        INSERT INTO tresors (id, owner_id, category, current_epoch, self_grant, updated_at)
                        VALUES (\(t.id), \(t.ownerID), \(t.category), \(Int64(t.currentEpoch)), \(grant), \(t.updatedAt))
                        """, logger: self.logger)
                }
                try await self.appendAudit(conn, [audit], now: t.updatedAt)
                return t
            }
        } catch where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict("tresor was created concurrently; retry")
        }
    }

    public func tresor(id: UUID) async throws -> TresorRow? {
        try await tresors(PostgresQuery(unsafeSQL: "SELECT \(Self.tresorColumns) FROM tresors WHERE id = $1", binds: binds(id))).first
    }

    public func tresors(ownerID: UUID) async throws -> [TresorRow] {
        try await tresors(PostgresQuery(unsafeSQL: "SELECT \(Self.tresorColumns) FROM tresors WHERE owner_id = $1 ORDER BY category", binds: binds(ownerID)))
    }

    static let shareColumns = "id, patient_id, doctor_id, tresor_id, category, state, grant_json, approval, reason, created_at, updated_at, expires_at, latest_grant"
    typealias ShareTuple = (UUID, UUID, UUID, UUID, String, String, String, String?, String?, Int64, Int64, Int64?, String?)

    static func shareRow(_ t: ShareTuple) throws -> ShareRow {
        ShareRow(id: t.0, patientID: t.1, doctorID: t.2, tresorID: t.3, category: t.4, state: ShareState(rawValue: t.5) ?? .rejected,
                 grant: try RowJSON.decode(Grant.self, t.6), approval: try RowJSON.decodeOptional(Approval.self, t.7),
                 latestGrant: try RowJSON.decodeOptional(Grant.self, t.12), reason: t.8,
                 createdAt: t.9, updatedAt: t.10, expiresAt: t.11)
    }

    private func shares(_ query: PostgresQuery, on conn: PostgresConnection? = nil) async throws -> [ShareRow] {
        let rows = if let conn { try await conn.query(query, logger: logger) } else { try await client.query(query, logger: logger) }
        var out: [ShareRow] = []
        for try await t in rows.decode(ShareTuple.self) { out.append(try Self.shareRow(t)) }
        return out
    }

    public func insertShare(_ s: ShareRow, audit: AuditEvent) async throws {
        let grant = try RowJSON.encode(s.grant)
        do {
            try await transaction { conn in
                try await conn.query("""
                    INSERT INTO shares (id, patient_id, doctor_id, tresor_id, category, state, grant_json, created_at, updated_at, expires_at)
                    VALUES (\(s.id), \(s.patientID), \(s.doctorID), \(s.tresorID), \(s.category), \(s.state.rawValue), \(grant), \(s.createdAt),
                            \(s.updatedAt), \(s.expiresAt))
                    """, logger: self.logger)
                try await self.appendAudit(conn, [audit], now: s.createdAt)
            }
        } catch where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict("a pending or active share of this category with this doctor exists")
        }
    }

    public func share(id: UUID) async throws -> ShareRow? {
        try await shares(PostgresQuery(unsafeSQL: "SELECT \(Self.shareColumns) FROM shares WHERE id = $1", binds: binds(id))).first
    }

    public func shares(patientID: UUID) async throws -> [ShareRow] {
        try await shares(PostgresQuery(unsafeSQL: "SELECT \(Self.shareColumns) FROM shares WHERE patient_id = $1 ORDER BY created_at", binds: binds(patientID)))
    }

    public func shares(doctorID: UUID) async throws -> [ShareRow] {
        try await shares(PostgresQuery(unsafeSQL: "SELECT \(Self.shareColumns) FROM shares WHERE doctor_id = $1 ORDER BY created_at", binds: binds(doctorID)))
    }

    public func shares(state: ShareState) async throws -> [ShareRow] {
        try await shares(PostgresQuery(unsafeSQL: "SELECT \(Self.shareColumns) FROM shares WHERE state = $1 ORDER BY created_at", binds: binds(state.rawValue)))
    }

    private func lockedShare(_ conn: PostgresConnection, _ id: UUID) async throws -> ShareRow {
        guard let s = try await shares(PostgresQuery(unsafeSQL: "SELECT \(Self.shareColumns) FROM shares WHERE id = $1 FOR UPDATE", binds: binds(id)),
                                       on: conn).first
        else { throw RepositoryError.notFound("share") }
        return s
    }

    public func transitionShare(id: UUID, from: Set<ShareState>, to: ShareState, approval: Approval?, reason: String?,
                                now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let appr = try approval.map(RowJSON.encode)
        return try await transaction { conn in
            var s = try await self.lockedShare(conn, id)
            guard from.contains(s.state) else { throw RepositoryError.invalidTransition(from: s.state.rawValue, to: to.rawValue) }
            try await conn.query("""
                UPDATE shares SET state = \(to.rawValue), approval = COALESCE(\(appr), approval),
                       approval_sequence = COALESCE(\(approval.map { Int64(bitPattern: $0.sequence) }), approval_sequence),
                       reason = COALESCE(\(reason), reason), updated_at = \(now)
                WHERE id = \(id)
                """, logger: self.logger)
            try await self.appendAudit(conn, [audit], now: now)
            s.state = to; s.approval = approval ?? s.approval; s.reason = reason ?? s.reason; s.updatedAt = now
            return s
        }
    }

    public func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let g = try RowJSON.encode(grant)
        return try await transaction { conn in
            var s = try await self.lockedShare(conn, id)
            guard s.state == .active else { throw RepositoryError.invalidTransition(from: s.state.rawValue, to: "active") }
            try await conn.query("UPDATE shares SET latest_grant = \(g), updated_at = \(now) WHERE id = \(id)", logger: self.logger)
            try await self.appendAudit(conn, [audit], now: now)
            s.latestGrant = grant; s.updatedAt = now
            return s
        }
    }

    public func expireShares(now: UnixMillis) async throws -> [ShareRow] {
        try await transaction { conn in
            // A pending share whose date passed before approval can no longer be approved: close it.
            let stale = try await self.shares(PostgresQuery(unsafeSQL: """
                SELECT \(Self.shareColumns) FROM shares WHERE state = 'pending' AND expires_at IS NOT NULL AND expires_at <= $1 FOR UPDATE SKIP LOCKED
                """, binds: binds(now)), on: conn)
            if !stale.isEmpty {
                try await conn.query("UPDATE shares SET state = 'rejected', reason = 'expired before approval', updated_at = \(now) WHERE id = ANY(\(stale.map(\.id)))",
                                     logger: self.logger)
                try await self.appendAudit(conn, stale.map { AuditEvent(actor: "server", action: "share.rejected", patientID: $0.patientID,
                                                                         details: ["share": $0.id.uuidString.lowercased(), "category": $0.category,
                                                                                   "reason": "expired before approval"]) }, now: now)
            }
            let due = try await self.shares(PostgresQuery(unsafeSQL: """
                SELECT \(Self.shareColumns) FROM shares WHERE state = 'active' AND expires_at IS NOT NULL AND expires_at <= $1 FOR UPDATE SKIP LOCKED
                """, binds: binds(now)), on: conn)
            guard !due.isEmpty else { return [] }
            try await conn.query("UPDATE shares SET state = 'expired', updated_at = \(now) WHERE id = ANY(\(due.map(\.id)))", logger: self.logger)
            try await self.appendAudit(conn, due.map { AuditEvent(actor: "server", action: "share.expired", patientID: $0.patientID,
                                                                   details: ["share": $0.id.uuidString.lowercased(),
                                                                             "doctor": $0.doctorID.uuidString.lowercased(), "category": $0.category]) },
                                       now: now)
            return due.map { var s = $0; s.state = .expired; s.updatedAt = now; return s }
        }
    }

    public func maxApprovalSequence() async throws -> UInt64 {
        var best: UInt64 = 0
        for try await v in try await client.query("SELECT COALESCE(MAX(approval_sequence), 0) FROM shares", logger: logger).decode(Int64.self) {
            best = max(best, UInt64(bitPattern: v))
        }
        for try await text in try await client.query("SELECT approval FROM users WHERE approval IS NOT NULL", logger: logger).decode(String.self) {
            if let a = try? RowJSON.decode(Approval.self, text) { best = max(best, a.sequence) }
        }
        return best
    }

    // MARK: Records

    public func storeVersions(ownerID: UUID, _ versions: [VersionRow]) async throws -> [StoreOutcome] {
        guard !versions.isEmpty else { return [] }
        let now = Date().unixMillis
        return try await transaction { conn in
            let logger = self.logger
            try await conn.query("INSERT INTO owner_sequences (owner_id, last_sequence) VALUES (\(ownerID), 0) ON CONFLICT DO NOTHING", logger: logger)
            var last: Int64 = 0
            for try await v in try await conn.query("SELECT last_sequence FROM owner_sequences WHERE owner_id = \(ownerID) FOR UPDATE", logger: logger)
                .decode(Int64.self) { last = v }
            let start = last

            // One round trip inserts the whole batch; RETURNING tells which ids were new.
            var inserted = Set<String>()
            let ids = versions.map(\.versionID)
            let rows = try await conn.query("""
                INSERT INTO versions (version_id, owner_id, record_id, tresor_id, epoch, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                SELECT v.id, \(ownerID), v.rid, v.tid, v.epoch, v.phys, v.ctr, v.dev, v.del, v.env
                FROM unnest(\(ids), \(versions.map(\.recordID)), \(versions.map(\.tresorID)), \(versions.map { Int64($0.epoch) }),
                            \(versions.map(\.hlcPhysical)), \(versions.map(\.hlcCounter)), \(versions.map(\.hlcDevice)), \(versions.map(\.deleted)),
                            \(versions.map { ByteBuffer(bytes: $0.envelopeJSON) }))
                     AS v(id, rid, tid, epoch, phys, ctr, dev, del, env)
                ON CONFLICT (version_id) DO NOTHING RETURNING version_id
                """, logger: logger)
            for try await id in rows.decode(String.self) { inserted.insert(id) }

            var heads: [String: HeadKey] = [:]
            let recordIDs = Array(Set(versions.map(\.recordID)))
            for try await (rid, p, c, d, del) in try await conn.query("""
                SELECT record_id, hlc_physical, hlc_counter, hlc_device, deleted FROM heads WHERE owner_id = \(ownerID) AND record_id = ANY(\(recordIDs))
                """, logger: logger).decode((String, Int64, Int64, String, Bool).self) {
                heads[rid] = HeadKey(hlcPhysical: p, hlcCounter: c, hlcDevice: d, deleted: del)
            }

            var outcomes: [StoreOutcome] = []
            var winners: [String: (VersionRow, Int64)] = [:]
            var seen = Set<String>()
            for v in versions {
                guard inserted.contains(v.versionID), seen.insert(v.versionID).inserted else { outcomes.append(.duplicate); continue }
                if let head = heads[v.recordID], !v.wins(over: head) { outcomes.append(.stored(sequence: nil)); continue }
                last += 1
                heads[v.recordID] = HeadKey(hlcPhysical: v.hlcPhysical, hlcCounter: v.hlcCounter, hlcDevice: v.hlcDevice, deleted: v.deleted)
                winners[v.recordID] = (v, last)
                outcomes.append(.stored(sequence: UInt64(last)))
            }
            if !winners.isEmpty {
                let w = Array(winners.values)
                try await conn.query("""
                    INSERT INTO heads (owner_id, record_id, tresor_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, sequence, changed_at)
                    SELECT \(ownerID), h.rid, h.tid, h.vid, h.phys, h.ctr, h.dev, h.del, h.seq, \(now)
                    FROM unnest(\(w.map(\.0.recordID)), \(w.map(\.0.tresorID)), \(w.map(\.0.versionID)), \(w.map(\.0.hlcPhysical)),
                                \(w.map(\.0.hlcCounter)), \(w.map(\.0.hlcDevice)), \(w.map(\.0.deleted)), \(w.map(\.1)))
                         AS h(rid, tid, vid, phys, ctr, dev, del, seq)
                    ON CONFLICT (owner_id, record_id) DO UPDATE SET tresor_id = excluded.tresor_id, version_id = excluded.version_id,
                        hlc_physical = excluded.hlc_physical, hlc_counter = excluded.hlc_counter, hlc_device = excluded.hlc_device,
                        deleted = excluded.deleted, sequence = excluded.sequence, changed_at = excluded.changed_at
                    """, logger: logger)
            }
            if last != start {
                try await conn.query("UPDATE owner_sequences SET last_sequence = \(last) WHERE owner_id = \(ownerID)", logger: logger)
            }
            return outcomes
        }
    }

    public func changes(ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int) async throws -> [ChangeRow] {
        let query: PostgresQuery
        if let tresorID {
            query = """
                SELECT h.sequence, v.envelope FROM heads h JOIN versions v ON v.version_id = h.version_id
                WHERE h.owner_id = \(ownerID) AND h.tresor_id = \(tresorID) AND h.sequence > \(Int64(bitPattern: since)) ORDER BY h.sequence LIMIT \(limit)
                """
        } else {
            query = """
                SELECT h.sequence, v.envelope FROM heads h JOIN versions v ON v.version_id = h.version_id
                WHERE h.owner_id = \(ownerID) AND h.sequence > \(Int64(bitPattern: since)) ORDER BY h.sequence LIMIT \(limit)
                """
        }
        var out: [ChangeRow] = []
        for try await (seq, env) in try await client.query(query, logger: logger).decode((Int64, ByteBuffer).self) {
            out.append(ChangeRow(sequence: UInt64(bitPattern: seq), envelopeJSON: Array(env.readableBytesView)))
        }
        return out
    }

    public func lastChange(ownerID: UUID, tresorID: UUID) async throws -> UnixMillis? {
        for try await v in try await client.query("SELECT MAX(changed_at) FROM heads WHERE owner_id = \(ownerID) AND tresor_id = \(tresorID)",
                                                  logger: logger).decode(Int64?.self) { return v }
        return nil
    }

    // MARK: Audit

    public func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws {
        try await transaction { conn in try await self.appendAudit(conn, events, now: now) }
    }

    public func auditEntries(after: UInt64, limit: Int, patientID: UUID?) async throws -> [AuditEntry] {
        let query: PostgresQuery = patientID.map {
            "SELECT sequence, at, actor, action, patient_id, details, previous_hash, hash FROM audit_log WHERE patient_id = \($0) AND sequence > \(Int64(clamping: after)) ORDER BY sequence LIMIT \(limit)"
        } ?? "SELECT sequence, at, actor, action, patient_id, details, previous_hash, hash FROM audit_log WHERE sequence > \(Int64(clamping: after)) ORDER BY sequence LIMIT \(limit)"
        var out: [AuditEntry] = []
        for try await (seq, at, actor, action, patient, details, prev, hash) in try await client.query(query, logger: logger)
            .decode((Int64, Int64, String, String, UUID?, String, String, String).self) {
            out.append(AuditEntry(sequence: UInt64(seq), at: at, actor: actor, action: action, patientID: patient,
                                  details: try RowJSON.decode([String: String].self, details), previousHash: prev, hash: hash))
        }
        return out
    }

    public func auditHead() async throws -> (sequence: UInt64, hash: String) {
        for try await (seq, hash) in try await client.query("SELECT sequence, hash FROM audit_head WHERE id = 1", logger: logger).decode((Int64, String).self) {
            return (UInt64(seq), hash)
        }
        throw RepositoryError.notFound("audit head")
    }

    public func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool {
        try await client.query("DELETE FROM admin_signatures WHERE seen_at < \(purgeBefore)", logger: logger)
        var fresh = false
        for try await _ in try await client.query("""
            INSERT INTO admin_signatures (signature, seen_at) VALUES (\(signature), \(at)) ON CONFLICT (signature) DO NOTHING RETURNING signature
            """, logger: logger).decode(String.self) { fresh = true }
        return fresh
    }
}

/// Builds a bind list for `PostgresQuery(unsafeSQL:binds:)` from encodable values.
func binds(_ values: any PostgresEncodable...) -> PostgresBindings {
    var b = PostgresBindings()
    for v in values { try! b.append(v) }
    return b
}

/// A configuration that cannot work.
public enum ConfigurationError: Error, CustomStringConvertible {
    case invalid(String)
    public var description: String {
        switch self { case let .invalid(m): return m }
    }
}
