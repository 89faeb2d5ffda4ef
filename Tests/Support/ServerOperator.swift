import Foundation
import VaultAPI
import VaultCore
import VaultServer

/// Whoever controls the server's database, editing it by meaning rather than by column (tests only): the
/// hostile tests say what the operator does ("drop a record head", "roll back the commitments"), and the
/// schema's names live here once, on either backend. Each edit runs outside the repository's rules.
public struct ServerOperator: Sendable {
    /// Runs SQL (one statement or several) on the database, as someone with access to it would.
    let execute: @Sendable (String) async throws -> Void
    let backend: Backend

    /// The operator of the database under `repository`.
    public init(_ repository: any VaultRepository) {
        self.init(backend: repository is SQLiteRepository ? .sqlite : .postgres) { try await repository.attackerExecutes($0) }
    }

    /// The operator of a database reached some other way (a server process's SQLite file, psql): `execute`
    /// runs the SQL it is given on it.
    public init(backend: Backend, execute: @escaping @Sendable (String) async throws -> Void) {
        self.backend = backend
        self.execute = execute
    }

    /// A table whose rows the schema keeps append-only.
    public enum GuardedTable: Sendable {
        case versions, auditLog, auditCheckpoints
    }

    /// Turns off the append-only guard of `table` (updates and deletes), as an operator with the schema's
    /// owner rights can.
    public func dropGuard(of table: GuardedTable) async throws {
        let sql: String =
            switch (table, backend) {
            case (.versions, .sqlite): "DROP TRIGGER IF EXISTS versions_append_only_u; DROP TRIGGER IF EXISTS versions_append_only_d"
            case (.versions, .postgres): "ALTER TABLE versions DISABLE TRIGGER versions_append_only"
            case (.auditLog, .sqlite): "DROP TRIGGER IF EXISTS audit_append_only_u; DROP TRIGGER IF EXISTS audit_append_only_d"
            case (.auditLog, .postgres): "ALTER TABLE audit_log DISABLE TRIGGER audit_append_only"
            case (.auditCheckpoints, .sqlite):
                "DROP TRIGGER IF EXISTS audit_checkpoints_append_only_u; DROP TRIGGER IF EXISTS audit_checkpoints_append_only_d"
            case (.auditCheckpoints, .postgres): "ALTER TABLE audit_checkpoints DISABLE TRIGGER audit_checkpoints_append_only"
            }
        try await execute(sql)
    }

    // MARK: Records

    /// Removes the head of `recordID`: the record stops being delivered.
    public func dropRecordHead(_ recordID: String) async throws {
        try await execute("DELETE FROM heads WHERE record_id = \(Self.text(recordID))")
    }

    /// Points the head of `recordID` at `versionID` (an older one, say), optionally as live or deleted.
    public func pointRecordHead(_ recordID: String, at versionID: String, deleted: Bool? = nil, sequence: UInt64? = nil) async throws {
        var set = ["version_id = \(Self.text(versionID))"]
        if let deleted { set.append("deleted = \(deleted)") }
        if let sequence { set.append("sequence = \(sequence)") }
        try await execute("UPDATE heads SET \(set.joined(separator: ", ")) WHERE record_id = \(Self.text(recordID))")
    }

    /// Forgets every tresor's state commitment, as if none had been pushed.
    public func dropCommitments() async throws {
        try await execute("DELETE FROM tresor_commitments")
    }

    /// From now on forgets every state commitment as soon as it is stored (a trigger the operator adds): the
    /// server accepts pushes and shows no commitment to anyone.
    public func withholdCommitments() async throws {
        switch backend {
        case .sqlite:
            try await execute(
                """
                CREATE TRIGGER withhold_commitments_i AFTER INSERT ON tresor_commitments BEGIN DELETE FROM tresor_commitments; END;
                CREATE TRIGGER withhold_commitments_u AFTER UPDATE ON tresor_commitments BEGIN DELETE FROM tresor_commitments; END
                """
            )
        case .postgres:
            try await execute(
                """
                CREATE FUNCTION withhold_commitments() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN DELETE FROM tresor_commitments; RETURN NULL; END $$;
                CREATE TRIGGER withhold_commitments AFTER INSERT OR UPDATE ON tresor_commitments
                FOR EACH STATEMENT EXECUTE FUNCTION withhold_commitments()
                """
            )
        }
        try await dropCommitments()
    }

    /// Stores `bytes` as the envelope of version `versionID` (the versions' guard must be dropped first).
    public func replaceStoredEnvelope(of versionID: String, with bytes: [UInt8]) async throws {
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        let literal = backend == .sqlite ? "X'\(hex)'" : "'\\x\(hex)'::bytea"
        try await execute("UPDATE versions SET envelope = \(literal) WHERE version_id = \(Self.text(versionID))")
    }

    /// Keeps a copy of every record head as it is now, for `restoreRecordHeads`.
    public func snapshotRecordHeads() async throws {
        try await execute("CREATE TABLE heads_backup AS SELECT * FROM heads")
    }

    /// Puts back every record head as `snapshotRecordHeads` kept it.
    public func restoreRecordHeads() async throws {
        try await execute("DELETE FROM heads")
        try await execute("INSERT INTO heads SELECT * FROM heads_backup")
    }

    /// Keeps a copy of every tresor's state commitment as it is now, for `restoreCommitments`.
    public func snapshotCommitments() async throws {
        try await execute("CREATE TABLE commitments_backup AS SELECT * FROM tresor_commitments")
    }

    /// Puts back the state commitments `snapshotCommitments` kept (older ones, say), and only those.
    public func restoreCommitments() async throws {
        try await execute("DELETE FROM tresor_commitments")
        try await execute("INSERT INTO tresor_commitments SELECT * FROM commitments_backup")
    }

    /// Changes the first character of the signature of every stored state commitment (SQLite only).
    public func alterCommitmentSignatures() async throws {
        guard backend == .sqlite else { throw OperatorError.sqliteOnly("alterCommitmentSignatures") }
        try await execute(
            """
            UPDATE tresor_commitments SET statement = CAST(json_set(CAST(statement AS TEXT), '$.signature',
                CASE WHEN substr(json_extract(CAST(statement AS TEXT), '$.signature'), 1, 1) = 'A' THEN 'B' ELSE 'A' END
                || substr(json_extract(CAST(statement AS TEXT), '$.signature'), 2)) AS BLOB)
            """
        )
    }

    /// An edit written for one backend only.
    public enum OperatorError: Error {
        case sqliteOnly(String)
    }

    /// Sets every owner's change sequence to `value` (a stored counter edited out of range).
    public func setChangeSequences(to value: Int64) async throws {
        try await execute("UPDATE owner_sequences SET last_sequence = \(value)")
    }

    // MARK: Audit log

    /// Replaces the details of the audit entry at `sequence` (its guard dropped first).
    public func editAuditDetails(sequence: UInt64, _ details: [String: String]) async throws {
        let json = String(decoding: try JSONEncoder.sorted.encode(details), as: UTF8.self)
        try await execute("UPDATE audit_log SET details = \(Self.text(json)) WHERE sequence = \(sequence)")
    }

    /// Moves the time of the audit entry at `sequence` by `ms` (its guard dropped first).
    public func shiftAuditTime(sequence: UInt64, by ms: Int64) async throws {
        try await execute("UPDATE audit_log SET at = at + (\(ms)) WHERE sequence = \(sequence)")
    }

    /// Deletes the audit entry at `sequence` (its guard dropped first).
    public func deleteAuditEntry(sequence: UInt64) async throws {
        try await execute("DELETE FROM audit_log WHERE sequence = \(sequence)")
    }

    /// Sets the recorded head of the audit chain to `sequence`.
    public func setAuditHead(sequence: Int64) async throws {
        try await execute("UPDATE audit_head SET sequence = \(sequence)")
    }

    // MARK: Accounts

    /// Replaces every stored user approval by `approval`.
    public func setUserApprovals(_ approval: Approval) async throws {
        let json = String(decoding: try JSONEncoder.sorted.encode(approval), as: UTF8.self)
        try await execute("UPDATE users SET approval = \(Self.text(json)) WHERE approval IS NOT NULL")
    }

    /// Rewrites every stored user approval, `from` replaced by `to` in its text (no signature redone).
    public func editUserApprovals(replacing from: String, with to: String) async throws {
        try await execute("UPDATE users SET approval = replace(approval, \(Self.text(from)), \(Self.text(to)))")
    }

    /// Raises the credential generation of `username` without ending their sessions.
    public func raiseCredentialGeneration(of username: String) async throws {
        try await execute(
            "UPDATE users SET credential_generation = credential_generation + 1 WHERE username = \(Self.text(username))"
        )
    }

    /// Suspends `username` (or reinstates them, `suspended` false) without ending their sessions.
    public func setSuspended(_ username: String, _ suspended: Bool) async throws {
        let set = suspended ? "suspended_at = 1, suspend_reason = 'x'" : "suspended_at = NULL, suspend_reason = NULL"
        try await execute("UPDATE users SET \(set) WHERE username = \(Self.text(username))")
    }

    /// Sets every login back-off row's counts and times to `value`.
    public func setLoginThrottle(to value: Int64) async throws {
        try await execute("UPDATE login_throttle SET failures = \(value), last_failure = \(value), expires_at = \(value)")
    }

    /// An SQL string literal (quotes doubled).
    static func text(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }
}

extension JSONEncoder {
    /// Sorted keys without escaped slashes, as the server stores signed statements.
    static var sorted: JSONEncoder {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }
}

extension VaultRepository {
    /// This database as its hostile operator edits it (tests only).
    public var databaseOperator: ServerOperator { ServerOperator(self) }
}
