import Foundation
import GRDB
import VaultAPI
import VaultCore
import VaultCrypto

/// The embedded default backend: SQLite through GRDB, one database file, WAL mode so reads run beside
/// the single writer. SQLite serialises writers, which is what keeps change sequences gap-free.
public final class SQLiteRepository: VaultRepository {
    public let backendName = "sqlite"
    let pool: DatabasePool

    /// Opens (creating if needed) the database at `path`; its folder is created too.
    public init(path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        var config = Configuration()
        config.foreignKeysEnabled = true
        config.busyMode = .timeout(10)
        pool = try DatabasePool(path: path, configuration: config)
    }

    // MARK: Schema

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        // Migrations are named, never edited once shipped, and use SQL rather than model types.
        m.registerMigration("v1-initial") { db in
            try db.execute(sql: """
                CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
                CREATE TABLE users (
                    id TEXT PRIMARY KEY,
                    username TEXT NOT NULL UNIQUE,
                    role TEXT NOT NULL CHECK (role IN ('patient', 'doctor')),
                    status TEXT NOT NULL CHECK (status IN ('pending', 'active', 'rejected')),
                    registration TEXT NOT NULL,
                    certificate TEXT,
                    approval TEXT,
                    reject_reason TEXT,
                    created_at INTEGER NOT NULL,
                    updated_at INTEGER NOT NULL);
                CREATE TABLE sessions (
                    token_hash TEXT PRIMARY KEY,
                    user_id TEXT NOT NULL REFERENCES users(id),
                    created_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL);
                CREATE TABLE tresors (
                    id TEXT PRIMARY KEY,
                    owner_id TEXT NOT NULL REFERENCES users(id),
                    category TEXT NOT NULL,
                    current_epoch INTEGER NOT NULL CHECK (current_epoch >= 1),
                    self_grant TEXT NOT NULL,
                    updated_at INTEGER NOT NULL,
                    UNIQUE (owner_id, category));
                CREATE TABLE shares (
                    id TEXT PRIMARY KEY,
                    patient_id TEXT NOT NULL REFERENCES users(id),
                    doctor_id TEXT NOT NULL REFERENCES users(id),
                    tresor_id TEXT NOT NULL REFERENCES tresors(id),
                    category TEXT NOT NULL,
                    state TEXT NOT NULL CHECK (state IN (\(Schema.shareStates))),
                    grant_json TEXT NOT NULL,
                    latest_grant TEXT,
                    approval TEXT,
                    approval_sequence INTEGER,
                    reason TEXT,
                    created_at INTEGER NOT NULL,
                    updated_at INTEGER NOT NULL,
                    expires_at INTEGER);
                CREATE UNIQUE INDEX shares_open ON shares (patient_id, doctor_id, tresor_id) WHERE state IN ('pending', 'active');
                CREATE INDEX shares_doctor ON shares (doctor_id, state);
                CREATE INDEX shares_patient ON shares (patient_id);
                CREATE TABLE owner_sequences (owner_id TEXT PRIMARY KEY, last_sequence INTEGER NOT NULL);
                CREATE TABLE versions (
                    version_id TEXT PRIMARY KEY,
                    owner_id TEXT NOT NULL,
                    record_id TEXT NOT NULL,
                    tresor_id TEXT NOT NULL,
                    epoch INTEGER NOT NULL,
                    hlc_physical INTEGER NOT NULL,
                    hlc_counter INTEGER NOT NULL,
                    hlc_device TEXT NOT NULL,
                    deleted INTEGER NOT NULL,
                    envelope BLOB NOT NULL);
                CREATE TABLE heads (
                    owner_id TEXT NOT NULL,
                    record_id TEXT NOT NULL,
                    tresor_id TEXT NOT NULL,
                    version_id TEXT NOT NULL REFERENCES versions(version_id),
                    hlc_physical INTEGER NOT NULL,
                    hlc_counter INTEGER NOT NULL,
                    hlc_device TEXT NOT NULL,
                    deleted INTEGER NOT NULL,
                    sequence INTEGER NOT NULL,
                    changed_at INTEGER NOT NULL,
                    PRIMARY KEY (owner_id, record_id));
                CREATE UNIQUE INDEX heads_sequence ON heads (owner_id, sequence);
                CREATE INDEX heads_tresor_sequence ON heads (owner_id, tresor_id, sequence);
                CREATE TABLE audit_log (
                    sequence INTEGER PRIMARY KEY,
                    at INTEGER NOT NULL,
                    actor TEXT NOT NULL,
                    action TEXT NOT NULL,
                    patient_id TEXT,
                    details TEXT NOT NULL,
                    previous_hash TEXT NOT NULL,
                    hash TEXT NOT NULL);
                CREATE INDEX audit_patient ON audit_log (patient_id, sequence);
                CREATE TABLE audit_head (id INTEGER PRIMARY KEY CHECK (id = 1), sequence INTEGER NOT NULL, hash TEXT NOT NULL);
                INSERT INTO audit_head (id, sequence, hash) VALUES (1, 0, '\(AuditChain.genesis)');
                CREATE TABLE admin_signatures (signature TEXT PRIMARY KEY, seen_at INTEGER NOT NULL);
                CREATE INDEX admin_signatures_seen ON admin_signatures (seen_at);
                CREATE TRIGGER versions_append_only_u BEFORE UPDATE ON versions BEGIN SELECT RAISE(ABORT, 'versions are append-only'); END;
                CREATE TRIGGER versions_append_only_d BEFORE DELETE ON versions BEGIN SELECT RAISE(ABORT, 'versions are append-only'); END;
                CREATE TRIGGER audit_append_only_u BEFORE UPDATE ON audit_log BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
                CREATE TRIGGER audit_append_only_d BEFORE DELETE ON audit_log BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
                """)
        }
        return m
    }

    public func migrate() async throws {
        try Self.migrator.migrate(pool)
        try await pool.write { db in
            if try Row.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'server_secret'") == nil {
                try db.execute(sql: "INSERT INTO meta (key, value) VALUES ('server_secret', ?)", arguments: [Data(RandomBytes.bytes(count: 32))])
            }
        }
    }

    public func serverSecret() async throws -> [UInt8] {
        try await pool.read { db in
            guard let data = try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'server_secret'") else {
                throw RepositoryError.notFound("server secret (database not migrated)")
            }
            return Array(data)
        }
    }

    public func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    /// Runs raw SQL outside the repository's rules: for maintenance, and for tests that play an attacker
    /// with write access to the database.
    public func executeRawSQL(_ sql: String) async throws {
        try await pool.write { db in try db.execute(sql: sql) }
    }

    // MARK: Audit helpers (inside a write transaction)

    private static func appendAudit(_ db: Database, _ events: [AuditEvent], now: UnixMillis) throws {
        guard !events.isEmpty else { return }
        guard let head = try Row.fetchOne(db, sql: "SELECT sequence, hash FROM audit_head WHERE id = 1") else {
            throw RepositoryError.notFound("audit head")
        }
        let entries = AuditBuilder.entries(for: events, after: (UInt64(head["sequence"] as Int64), head["hash"]), now: now)
        let insert = try db.cachedStatement(sql: """
            INSERT INTO audit_log (sequence, at, actor, action, patient_id, details, previous_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """)
        for e in entries {
            try insert.execute(arguments: [Int64(e.sequence), e.at, e.actor, e.action, e.patientID.map(Self.id), try RowJSON.encode(e.details),
                                           e.previousHash, e.hash])
        }
        let last = entries.last!
        try db.execute(sql: "UPDATE audit_head SET sequence = ?, hash = ? WHERE id = 1", arguments: [Int64(last.sequence), last.hash])
    }

    static func id(_ uuid: UUID) -> String { uuid.uuidString.lowercased() }

    static func uuid(_ row: Row, _ column: String) throws -> UUID {
        guard let text: String = row[column], let id = UUID(uuidString: text) else { throw RepositoryError.notFound("bad uuid in \(column)") }
        return id
    }

    static func isUniqueViolation(_ error: Error) -> Bool {
        guard let e = error as? DatabaseError else { return false }
        return e.resultCode == .SQLITE_CONSTRAINT && (e.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE || e.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY)
    }

    // MARK: Users and sessions

    static func userRow(_ row: Row) throws -> UserRow {
        UserRow(id: try uuid(row, "id"), username: row["username"], role: Role(rawValue: row["role"]) ?? .patient,
                status: AccountStatus(rawValue: row["status"]) ?? .pending,
                registration: try RowJSON.decode(RegistrationRequest.self, row["registration"]),
                certificate: try RowJSON.decodeOptional(Certificate.self, row["certificate"]),
                approval: try RowJSON.decodeOptional(Approval.self, row["approval"]), rejectReason: row["reject_reason"],
                createdAt: row["created_at"], updatedAt: row["updated_at"])
    }

    public func insertUser(_ user: UserRow, audit: AuditEvent) async throws {
        let registration = try RowJSON.encode(user.registration)
        do {
            try await pool.write { db in
                try db.execute(sql: """
                    INSERT INTO users (id, username, role, status, registration, certificate, approval, reject_reason, created_at, updated_at)
                    VALUES (?, ?, ?, ?, ?, NULL, NULL, NULL, ?, ?)
                    """, arguments: [Self.id(user.id), user.username, user.role.rawValue, user.status.rawValue, registration, user.createdAt, user.updatedAt])
                try Self.appendAudit(db, [audit], now: user.createdAt)
            }
        } catch where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict("username or user id already registered")
        }
    }

    public func user(id: UUID) async throws -> UserRow? {
        try await pool.read { db in try Row.fetchOne(db, sql: "SELECT * FROM users WHERE id = ?", arguments: [Self.id(id)]).map(Self.userRow) }
    }

    public func user(username: String) async throws -> UserRow? {
        try await pool.read { db in try Row.fetchOne(db, sql: "SELECT * FROM users WHERE username = ?", arguments: [username]).map(Self.userRow) }
    }

    public func users() async throws -> [UserRow] {
        try await pool.read { db in try Row.fetchAll(db, sql: "SELECT * FROM users ORDER BY created_at, username").map(Self.userRow) }
    }

    public func decideUser(id: UUID, status: AccountStatus, certificate: Certificate?, approval: Approval?, reason: String?,
                           now: UnixMillis, audit: AuditEvent) async throws -> UserRow {
        let cert = try certificate.map(RowJSON.encode), appr = try approval.map(RowJSON.encode)
        return try await pool.write { db in
            try db.execute(sql: """
                UPDATE users SET status = ?, certificate = ?, approval = ?, reject_reason = ?, updated_at = ? WHERE id = ? AND status = 'pending'
                """, arguments: [status.rawValue, cert, appr, reason, now, Self.id(id)])
            guard db.changesCount == 1 else {
                let current = try String.fetchOne(db, sql: "SELECT status FROM users WHERE id = ?", arguments: [Self.id(id)])
                guard let current else { throw RepositoryError.notFound("user") }
                throw RepositoryError.invalidTransition(from: current, to: status.rawValue)
            }
            try Self.appendAudit(db, [audit], now: now)
            return try Self.userRow(try Row.fetchOne(db, sql: "SELECT * FROM users WHERE id = ?", arguments: [Self.id(id)])!)
        }
    }

    public func insertSession(_ s: SessionRow) async throws {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM sessions WHERE expires_at <= ?", arguments: [s.createdAt])
            try db.execute(sql: "INSERT INTO sessions (token_hash, user_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
                           arguments: [s.tokenHash, Self.id(s.userID), s.createdAt, s.expiresAt])
        }
    }

    public func session(tokenHash: String) async throws -> SessionRow? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM sessions WHERE token_hash = ?", arguments: [tokenHash]).map {
                SessionRow(tokenHash: $0["token_hash"], userID: try Self.uuid($0, "user_id"), createdAt: $0["created_at"], expiresAt: $0["expires_at"])
            }
        }
    }

    public func deleteSession(tokenHash: String) async throws {
        try await pool.write { db in try db.execute(sql: "DELETE FROM sessions WHERE token_hash = ?", arguments: [tokenHash]) }
    }

    // MARK: Tresors and shares

    static func tresorRow(_ row: Row) throws -> TresorRow {
        TresorRow(id: try uuid(row, "id"), ownerID: try uuid(row, "owner_id"), category: row["category"],
                  currentEpoch: UInt32(row["current_epoch"] as Int64), selfGrant: try RowJSON.decode(Grant.self, row["self_grant"]),
                  updatedAt: row["updated_at"])
    }

    public func upsertTresor(_ t: TresorRow, audit: AuditEvent) async throws -> TresorRow {
        let grant = try RowJSON.encode(t.selfGrant)
        return try await pool.write { db in
            if let existing = try Row.fetchOne(db, sql: "SELECT * FROM tresors WHERE id = ?", arguments: [Self.id(t.id)]).map(Self.tresorRow) {
                guard existing.ownerID == t.ownerID, existing.category == t.category else { throw RepositoryError.conflict("tresor belongs to another owner or category") }
                guard t.currentEpoch >= existing.currentEpoch else {
                    throw RepositoryError.conflict("tresor is already at epoch \(existing.currentEpoch)")
                }
                if t.currentEpoch == existing.currentEpoch {
                    // Another device declared this epoch already: with other keys that is a conflict the client resolves.
                    guard t.selfGrant == existing.selfGrant else { throw RepositoryError.conflict("tresor epoch \(t.currentEpoch) is already declared with other keys") }
                    return existing
                }
                try db.execute(sql: "UPDATE tresors SET current_epoch = ?, self_grant = ?, updated_at = ? WHERE id = ?",
                               arguments: [Int64(t.currentEpoch), grant, t.updatedAt, Self.id(t.id)])
            } else {
                try db.execute(sql: "INSERT INTO tresors (id, owner_id, category, current_epoch, self_grant, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                               arguments: [Self.id(t.id), Self.id(t.ownerID), t.category, Int64(t.currentEpoch), grant, t.updatedAt])
            }
            try Self.appendAudit(db, [audit], now: t.updatedAt)
            return t
        }
    }

    public func tresor(id: UUID) async throws -> TresorRow? {
        try await pool.read { db in try Row.fetchOne(db, sql: "SELECT * FROM tresors WHERE id = ?", arguments: [Self.id(id)]).map(Self.tresorRow) }
    }

    public func tresors(ownerID: UUID) async throws -> [TresorRow] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM tresors WHERE owner_id = ? ORDER BY category", arguments: [Self.id(ownerID)]).map(Self.tresorRow)
        }
    }

    static func shareRow(_ row: Row) throws -> ShareRow {
        ShareRow(id: try uuid(row, "id"), patientID: try uuid(row, "patient_id"), doctorID: try uuid(row, "doctor_id"),
                 tresorID: try uuid(row, "tresor_id"), category: row["category"], state: ShareState(rawValue: row["state"]) ?? .rejected,
                 grant: try RowJSON.decode(Grant.self, row["grant_json"]), approval: try RowJSON.decodeOptional(Approval.self, row["approval"]),
                 latestGrant: try RowJSON.decodeOptional(Grant.self, row["latest_grant"]), reason: row["reason"], createdAt: row["created_at"], updatedAt: row["updated_at"], expiresAt: row["expires_at"])
    }

    public func insertShare(_ s: ShareRow, audit: AuditEvent) async throws {
        let grant = try RowJSON.encode(s.grant)
        do {
            try await pool.write { db in
                try db.execute(sql: """
                    INSERT INTO shares (id, patient_id, doctor_id, tresor_id, category, state, grant_json, approval, approval_sequence, reason,
                                        created_at, updated_at, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, ?, ?, ?)
                    """, arguments: [Self.id(s.id), Self.id(s.patientID), Self.id(s.doctorID), Self.id(s.tresorID), s.category, s.state.rawValue,
                                     grant, s.createdAt, s.updatedAt, s.expiresAt])
                try Self.appendAudit(db, [audit], now: s.createdAt)
            }
        } catch where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict("a pending or active share of this category with this doctor exists")
        }
    }

    public func share(id: UUID) async throws -> ShareRow? {
        try await pool.read { db in try Row.fetchOne(db, sql: "SELECT * FROM shares WHERE id = ?", arguments: [Self.id(id)]).map(Self.shareRow) }
    }

    public func shares(patientID: UUID) async throws -> [ShareRow] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM shares WHERE patient_id = ? ORDER BY created_at", arguments: [Self.id(patientID)]).map(Self.shareRow)
        }
    }

    public func shares(doctorID: UUID) async throws -> [ShareRow] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM shares WHERE doctor_id = ? ORDER BY created_at", arguments: [Self.id(doctorID)]).map(Self.shareRow)
        }
    }

    public func shares(state: ShareState) async throws -> [ShareRow] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM shares WHERE state = ? ORDER BY created_at", arguments: [state.rawValue]).map(Self.shareRow)
        }
    }

    public func transitionShare(id: UUID, from: Set<ShareState>, to: ShareState, approval: Approval?, reason: String?,
                                now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let appr = try approval.map(RowJSON.encode)
        let allowed = from.map { "'\($0.rawValue)'" }.joined(separator: ",")
        return try await pool.write { db in
            try db.execute(sql: """
                UPDATE shares SET state = ?, approval = COALESCE(?, approval), approval_sequence = COALESCE(?, approval_sequence),
                       reason = COALESCE(?, reason), updated_at = ?
                WHERE id = ? AND state IN (\(allowed))
                """, arguments: [to.rawValue, appr, approval.map { Int64(bitPattern: $0.sequence) }, reason, now, Self.id(id)])
            guard db.changesCount == 1 else {
                guard let current = try String.fetchOne(db, sql: "SELECT state FROM shares WHERE id = ?", arguments: [Self.id(id)]) else {
                    throw RepositoryError.notFound("share")
                }
                throw RepositoryError.invalidTransition(from: current, to: to.rawValue)
            }
            try Self.appendAudit(db, [audit], now: now)
            return try Self.shareRow(try Row.fetchOne(db, sql: "SELECT * FROM shares WHERE id = ?", arguments: [Self.id(id)])!)
        }
    }

    public func updateShareGrant(id: UUID, grant: Grant, now: UnixMillis, audit: AuditEvent) async throws -> ShareRow {
        let g = try RowJSON.encode(grant)
        return try await pool.write { db in
            try db.execute(sql: "UPDATE shares SET latest_grant = ?, updated_at = ? WHERE id = ? AND state = 'active'", arguments: [g, now, Self.id(id)])
            guard db.changesCount == 1 else {
                guard let current = try String.fetchOne(db, sql: "SELECT state FROM shares WHERE id = ?", arguments: [Self.id(id)]) else {
                    throw RepositoryError.notFound("share")
                }
                throw RepositoryError.invalidTransition(from: current, to: "active")
            }
            try Self.appendAudit(db, [audit], now: now)
            return try Self.shareRow(try Row.fetchOne(db, sql: "SELECT * FROM shares WHERE id = ?", arguments: [Self.id(id)])!)
        }
    }

    public func expireShares(now: UnixMillis) async throws -> [ShareRow] {
        try await pool.write { db in
            // A pending share whose date passed before approval can no longer be approved: close it.
            let stale = try Row.fetchAll(db, sql: "SELECT * FROM shares WHERE state = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?",
                                         arguments: [now]).map(Self.shareRow)
            for s in stale {
                try db.execute(sql: "UPDATE shares SET state = 'rejected', reason = 'expired before approval', updated_at = ? WHERE id = ?", arguments: [now, Self.id(s.id)])
            }
            try Self.appendAudit(db, stale.map { AuditEvent(actor: "server", action: "share.rejected", patientID: $0.patientID,
                                                             details: ["share": Self.id($0.id), "category": $0.category, "reason": "expired before approval"]) },
                                 now: now)
            let due = try Row.fetchAll(db, sql: "SELECT * FROM shares WHERE state = 'active' AND expires_at IS NOT NULL AND expires_at <= ?",
                                       arguments: [now]).map(Self.shareRow)
            guard !due.isEmpty else { return [] }
            for s in due {
                try db.execute(sql: "UPDATE shares SET state = 'expired', updated_at = ? WHERE id = ? AND state = 'active'", arguments: [now, Self.id(s.id)])
            }
            try Self.appendAudit(db, due.map { AuditEvent(actor: "server", action: "share.expired", patientID: $0.patientID,
                                                           details: ["share": Self.id($0.id), "doctor": Self.id($0.doctorID), "category": $0.category]) },
                                 now: now)
            return due.map { var s = $0; s.state = .expired; s.updatedAt = now; return s }
        }
    }

    public func maxApprovalSequence() async throws -> UInt64 {
        try await pool.read { db in
            let shares = try Int64.fetchOne(db, sql: "SELECT MAX(approval_sequence) FROM shares") ?? 0
            let users = try String.fetchAll(db, sql: "SELECT approval FROM users WHERE approval IS NOT NULL")
                .compactMap { try? RowJSON.decode(Approval.self, $0).sequence }.max() ?? 0
            return max(UInt64(bitPattern: shares), users)
        }
    }

    // MARK: Records

    public func storeVersions(ownerID: UUID, _ versions: [VersionRow]) async throws -> [StoreOutcome] {
        let owner = Self.id(ownerID)
        let now = Date().unixMillis
        return try await pool.write { db in
            var last = try Int64.fetchOne(db, sql: "SELECT last_sequence FROM owner_sequences WHERE owner_id = ?", arguments: [owner]) ?? 0
            let start = last
            let insertVersion = try db.cachedStatement(sql: """
                INSERT INTO versions (version_id, owner_id, record_id, tresor_id, epoch, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (version_id) DO NOTHING
                """)
            let readHead = try db.cachedStatement(sql: "SELECT hlc_physical, hlc_counter, hlc_device, deleted FROM heads WHERE owner_id = ? AND record_id = ?")
            let writeHead = try db.cachedStatement(sql: """
                INSERT INTO heads (owner_id, record_id, tresor_id, version_id, hlc_physical, hlc_counter, hlc_device, deleted, sequence, changed_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (owner_id, record_id) DO UPDATE SET tresor_id = excluded.tresor_id, version_id = excluded.version_id,
                    hlc_physical = excluded.hlc_physical, hlc_counter = excluded.hlc_counter, hlc_device = excluded.hlc_device,
                    deleted = excluded.deleted, sequence = excluded.sequence, changed_at = excluded.changed_at
                """)
            var outcomes: [StoreOutcome] = []
            outcomes.reserveCapacity(versions.count)
            for v in versions {
                try insertVersion.execute(arguments: [v.versionID, owner, v.recordID, Self.id(v.tresorID), Int64(v.epoch), v.hlcPhysical,
                                                      v.hlcCounter, v.hlcDevice, v.deleted, Data(v.envelopeJSON)])
                guard db.changesCount == 1 else { outcomes.append(.duplicate); continue }
                let head = try Row.fetchOne(readHead, arguments: [owner, v.recordID]).map {
                    HeadKey(hlcPhysical: $0[0], hlcCounter: $0[1], hlcDevice: $0[2], deleted: $0[3])
                }
                if let head, !v.wins(over: head) { outcomes.append(.stored(sequence: nil)); continue }
                last += 1
                try writeHead.execute(arguments: [owner, v.recordID, Self.id(v.tresorID), v.versionID, v.hlcPhysical, v.hlcCounter, v.hlcDevice,
                                                  v.deleted, last, now])
                outcomes.append(.stored(sequence: UInt64(last)))
            }
            if last != start {
                try db.execute(sql: """
                    INSERT INTO owner_sequences (owner_id, last_sequence) VALUES (?, ?)
                    ON CONFLICT (owner_id) DO UPDATE SET last_sequence = excluded.last_sequence
                    """, arguments: [owner, last])
            }
            return outcomes
        }
    }

    public func changes(ownerID: UUID, tresorID: UUID?, since: UInt64, limit: Int) async throws -> [ChangeRow] {
        try await pool.read { db in
            let sql = """
                SELECT h.sequence, v.envelope FROM heads h JOIN versions v ON v.version_id = h.version_id
                WHERE h.owner_id = ? \(tresorID == nil ? "" : "AND h.tresor_id = ?") AND h.sequence > ? ORDER BY h.sequence LIMIT ?
                """
            var args: [(any DatabaseValueConvertible)?] = [Self.id(ownerID)]
            if let tresorID { args.append(Self.id(tresorID)) }
            args.append(Int64(bitPattern: since)); args.append(limit)
            let statement = try db.cachedStatement(sql: sql)
            return try Row.fetchAll(statement, arguments: StatementArguments(args)).map {
                ChangeRow(sequence: UInt64(bitPattern: $0[0] as Int64), envelopeJSON: Array($0[1] as Data))
            }
        }
    }

    public func lastChange(ownerID: UUID, tresorID: UUID) async throws -> UnixMillis? {
        try await pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT MAX(changed_at) FROM heads WHERE owner_id = ? AND tresor_id = ?", arguments: [Self.id(ownerID), Self.id(tresorID)])
        }
    }

    // MARK: Audit

    public func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws {
        try await pool.write { db in try Self.appendAudit(db, events, now: now) }
    }

    public func auditEntries(after: UInt64, limit: Int, patientID: UUID?) async throws -> [AuditEntry] {
        try await pool.read { db in
            let rows: [Row]
            if let patientID {
                rows = try Row.fetchAll(db, sql: "SELECT * FROM audit_log WHERE patient_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
                                        arguments: [Self.id(patientID), Int64(clamping: after), limit])
            } else {
                rows = try Row.fetchAll(db, sql: "SELECT * FROM audit_log WHERE sequence > ? ORDER BY sequence LIMIT ?", arguments: [Int64(clamping: after), limit])
            }
            return try rows.map {
                AuditEntry(sequence: UInt64($0["sequence"] as Int64), at: $0["at"], actor: $0["actor"], action: $0["action"],
                           patientID: ($0["patient_id"] as String?).flatMap(UUID.init(uuidString:)),
                           details: try RowJSON.decode([String: String].self, $0["details"]), previousHash: $0["previous_hash"], hash: $0["hash"])
            }
        }
    }

    public func auditHead() async throws -> (sequence: UInt64, hash: String) {
        try await pool.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT sequence, hash FROM audit_head WHERE id = 1") else { throw RepositoryError.notFound("audit head") }
            return (UInt64(row["sequence"] as Int64), row["hash"])
        }
    }

    public func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM admin_signatures WHERE seen_at < ?", arguments: [purgeBefore])
            try db.execute(sql: "INSERT INTO admin_signatures (signature, seen_at) VALUES (?, ?) ON CONFLICT (signature) DO NOTHING",
                           arguments: [signature, at])
            return db.changesCount == 1
        }
    }
}
