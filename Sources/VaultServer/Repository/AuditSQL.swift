import Foundation
import VaultAPI
import VaultCore

/// The statements of the audit log, its checkpoints and the admin requests' replay guard (Docs/design.md §6),
/// written once for both engines.
enum AuditSQL {
    /// The recorded head; on PostgreSQL its row lock orders concurrent appenders (after waiting, READ
    /// COMMITTED reads the row again).
    static func head(_ lock: SQLStatement.ForUpdate? = nil) -> SQLStatement {
        "SELECT sequence, hash FROM audit_head WHERE id = 1\(forUpdate: lock)"
    }

    /// The hash of the newest entry about `patient`.
    static func patientHead(_ patient: UUID) -> SQLStatement {
        "SELECT hash AS value FROM audit_log WHERE patient_id = \(patient) ORDER BY sequence DESC LIMIT 1"
    }

    /// The hash of the newest entry about each of `patients` (non-empty), in one statement: a row per
    /// patient, `n` its index, `value` the hash or NULL. Each is the one-row index lookup of `patientHead`.
    static func patientHeads(_ patients: [UUID]) -> SQLStatement {
        var out: SQLStatement = ""
        for (n, p) in patients.enumerated() {
            let union = n == 0 ? "" : " UNION ALL "
            out = "\(out)\(sql: union)SELECT \(sql: String(n)) AS n, (\(patientHead(p))) AS value"
        }
        return out
    }

    static let serverSecret: SQLStatement = "SELECT value FROM meta WHERE key = 'server_secret'"

    /// One statement inserting `entries` (non-empty), in their order.
    static func insert(_ entries: [AuditEntry]) throws -> SQLStatement {
        var rows: SQLStatement = ""
        for (n, e) in entries.enumerated() {
            let row: SQLStatement = """
                (\(Int64(e.sequence)), \(e.at), \(e.actor), \(e.action), \(e.patientID), \(try RowJSON.encode(e.details)),
                 \(e.previousHash), \(e.hash), \(Int64(e.entryFormat)), \(AuditChain.digest(of: e)), \(e.patientLink))
                """
            rows = "\(rows)\(sql: n == 0 ? "" : ", ")\(row)"
        }
        return """
            INSERT INTO audit_log (sequence, at, actor, action, patient_id, details, previous_hash, hash, format, digest, patient_link)
            VALUES \(rows)
            """
    }

    /// Rows per insert statement of a batch (11 binds each).
    static let insertRows = 64

    static func moveHead(to e: AuditEntry) -> SQLStatement {
        "UPDATE audit_head SET sequence = \(Int64(e.sequence)), hash = \(e.hash) WHERE id = 1"
    }

    static func entries(after: UInt64, limit: Int, patientID: UUID?) -> SQLStatement {
        let about: SQLStatement = if let patientID { "patient_id = \(patientID) AND " } else { "" }
        return "SELECT * FROM audit_log WHERE \(about)sequence > \(Int64(clamping: after)) ORDER BY sequence LIMIT \(Int64(limit))"
    }

    static func links(after: UInt64, limit: Int) -> SQLStatement {
        "SELECT \(sql: AuditLink.columns) FROM audit_log WHERE sequence > \(Int64(clamping: after)) ORDER BY sequence LIMIT \(Int64(limit))"
    }

    static func insertCheckpoint(_ c: AuditCheckpoint, storedAt: UnixMillis) -> SQLStatement {
        """
        INSERT INTO audit_checkpoints (sequence, head_hash, signed_at, signature, stored_at)
        VALUES (\(Int64(clamping: c.sequence)), \(c.headHash), \(c.signedAt), \(c.signature.base64URL), \(storedAt))
        """
    }

    static let checkpoints: SQLStatement = "SELECT * FROM audit_checkpoints ORDER BY sequence"

    static func forgetAdminSignatures(before: UnixMillis) -> SQLStatement { "DELETE FROM admin_signatures WHERE seen_at < \(before)" }

    /// Returns the signature when it was new, no row when it was seen before.
    static func rememberAdminSignature(_ signature: String, at: UnixMillis) -> SQLStatement {
        """
        INSERT INTO admin_signatures (signature, seen_at) VALUES (\(signature), \(at)) ON CONFLICT (signature) DO NOTHING
        RETURNING signature AS value
        """
    }

    /// Appends `events` inside the caller's transaction, chained onto the recorded head, whose row lock
    /// orders concurrent appenders on PostgreSQL (SQLite's single writer orders them as wholes).
    static func append(_ sql: some SQLConnection, _ events: [AuditEvent], now: UnixMillis) async throws {
        guard !events.isEmpty else { return }
        let head = try await sql.row(AuditHeadRow.self, Self.head(.wait))
        let patientHeads = try await Self.patientHeads(sql, AuditBuilder.patients(events))
        let secret = try await sql.row(StoredBytes.self, Self.serverSecret)?.value
        let entries = try Self.entries(for: events, head: head, patientHeads: patientHeads, secret: secret, now: now)
        // A batch (`AuditBatcher`) is a few statements, not one per entry, while the head is locked.
        for start in stride(from: 0, to: entries.count, by: insertRows) {
            try await sql.execute(try Self.insert(Array(entries[start..<min(start + insertRows, entries.count)])))
        }
        try await sql.execute(Self.moveHead(to: entries.last!))
    }

    /// The hash of the newest stored entry about each of `patients` that has one, 64 patients a statement.
    static func patientHeads(_ sql: some SQLConnection, _ patients: [UUID]) async throws -> [UUID: String] {
        var heads: [UUID: String] = [:]
        for start in stride(from: 0, to: patients.count, by: insertRows) {
            let some = Array(patients[start..<min(start + insertRows, patients.count)])
            for row in try await sql.rows(PatientHeadRow.self, Self.patientHeads(some)) {
                guard let hash = row.value, some.indices.contains(row.n) else { continue }
                heads[some[row.n]] = hash
            }
        }
        return heads
    }

    /// The entries `events` become after the head read in the caller's transaction (`head`), each chained
    /// onto the one before and linked to the newest entry about its patient (`AuditBuilder`).
    static func entries(
        for events: [AuditEvent],
        head: AuditHeadRow?,
        patientHeads: [UUID: String],
        secret: [UInt8]?,
        now: UnixMillis
    ) throws -> [AuditEntry] {
        guard let head else { throw RepositoryError.notFound("audit head") }
        guard let secret else { throw RepositoryError.notFound("server secret (database not migrated)") }
        return try AuditBuilder.entries(
            for: events,
            after: (head.sequence, head.hash),
            patientHeads: patientHeads,
            serverSecret: secret,
            now: now
        )
    }
}

/// A row of `AuditSQL.patientHeads`: the patient's index in the list, and its newest entry's hash if any.
struct PatientHeadRow: StoredRowDecodable, Sendable {
    var n: Int
    var value: String?
    init(stored r: some StoredRow) throws {
        n = Int(clamping: try r.int64("n"))
        value = try r.optionalString("value")
    }
}

/// A `BLOB`/`BYTEA` column named `value`.
struct StoredBytes: StoredRowDecodable, Sendable {
    var value: [UInt8]
    init(stored r: some StoredRow) throws { value = try r.bytes("value") }
}

/// The audit log's reads and writes, written once over either engine's `SQLStore`.
protocol SQLAuditStore: AuditRepository, SQLStore {}

extension SQLAuditStore {
    public func appendAudit(_ events: [AuditEvent], now: UnixMillis) async throws {
        try await transaction(conflict: nil) { sql in try await AuditSQL.append(sql, events, now: now) }
    }

    public func rememberAdminSignature(_ signature: String, at: UnixMillis, purgeBefore: UnixMillis) async throws -> Bool {
        try await transaction(conflict: nil) { sql in
            try await sql.execute(AuditSQL.forgetAdminSignatures(before: purgeBefore))
            return try await sql.row(StoredText.self, AuditSQL.rememberAdminSignature(signature, at: at)) != nil
        }
    }

    public func auditEntries(after: UInt64, limit: Int, patientID: UUID?) async throws -> [AuditEntry] {
        try await rows(AuditEntry.self, AuditSQL.entries(after: after, limit: limit, patientID: patientID))
    }

    public func auditHead() async throws -> (sequence: UInt64, hash: String) {
        guard let head = try await row(AuditHeadRow.self, AuditSQL.head()) else { throw RepositoryError.notFound("audit head") }
        return (head.sequence, head.hash)
    }

    public func auditLinks(after: UInt64, limit: Int) async throws -> [AuditLink] {
        try await rows(AuditLink.self, AuditSQL.links(after: after, limit: limit))
    }

    public func insertAuditCheckpoint(_ checkpoint: AuditCheckpoint, storedAt: UnixMillis) async throws {
        let insert = AuditSQL.insertCheckpoint(checkpoint, storedAt: storedAt)
        try await execute(insert, audit: [], now: storedAt, conflict: AuditCheckpoint.alreadyStored(checkpoint.sequence))
    }

    public func auditCheckpoints() async throws -> [AuditCheckpoint] { try await rows(AuditCheckpoint.self, AuditSQL.checkpoints) }
}
