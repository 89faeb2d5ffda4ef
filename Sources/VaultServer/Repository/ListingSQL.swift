import Foundation
import VaultAPI
import VaultCore

/// Pages of the listings that grow with the clinic (Docs/design.md §6.1), each in a stable order by
/// id: a page is the rows whose id is above the cursor, so a row added or removed between two pages never
/// makes another one skipped or repeated. Both engines order ids alike (SQLite's lower-case text, PostgreSQL's
/// `uuid` byte order).
public protocol ListingRepository: Sendable {
    /// Up to `limit` users with an id above `after`, by id; only those in `status` when one is given.
    func users(after: UUID?, status: AccountStatus?, limit: Int) async throws -> [UserRow]
    /// Up to `limit` shares in `state` with an id above `after`, by id, as stored (`expireShares` not run).
    func shares(state: ShareState, after: UUID?, limit: Int) async throws -> [ShareRow]
    /// The active shares of `doctorID` of its first `limit` patients with an id above `after` (by patient
    /// id, then by when each was made), each with its patient's name and the newest change of its category:
    /// a page of the doctor's patient list in one statement.
    func patientShares(doctorID: UUID, patientsAfter after: UUID?, limit: Int) async throws -> [PatientShareRow]
    /// Up to `limit` live sessions of the account (as `sessionEntries(userID:now:)`) whose id (`SessionInfo.id`,
    /// the first 16 hex digits of the token hash) is above `after`, by id.
    func sessionEntries(userID: UUID, now: UnixMillis, after: String?, limit: Int) async throws -> [SessionEntry]
}

/// The statements of the pages, written once for both engines.
enum ListingSQL {
    /// `AND column > after`, or nothing for the first page.
    static func above(_ column: String, _ after: UUID?) -> SQLStatement {
        guard let after else { return "" }
        return " AND \(sql: column) > \(after)"
    }

    static func users(after: UUID?, status: AccountStatus?, limit: Int) -> SQLStatement {
        let state: SQLStatement = status.map { " AND status = \($0.rawValue)" } ?? ""
        return "SELECT * FROM users WHERE 1 = 1\(state)\(above("id", after)) ORDER BY id LIMIT \(Int64(limit))"
    }

    static func shares(state: ShareState, after: UUID?, limit: Int) -> SQLStatement {
        "SELECT * FROM shares WHERE state = \(state.rawValue)\(above("id", after)) ORDER BY id LIMIT \(Int64(limit))"
    }

    /// The newest change of a category is the head with the highest sequence (`heads_sequence`), as
    /// `RecordSQL.lastChange` reads it for one.
    static func patientShares(doctorID: UUID, patientsAfter after: UUID?, limit: Int) -> SQLStatement {
        """
        SELECT s.patient_id, s.tresor_id, s.category, s.expires_at, s.updated_at, u.username,
            (SELECT h.changed_at FROM heads h WHERE h.owner_id = s.patient_id AND h.tresor_id = s.tresor_id
                ORDER BY h.sequence DESC LIMIT 1) AS last_change
        FROM shares s LEFT JOIN users u ON u.id = s.patient_id
        WHERE s.doctor_id = \(doctorID) AND s.state = 'active' AND s.patient_id IN (
            SELECT DISTINCT patient_id FROM shares WHERE doctor_id = \(doctorID) AND state = 'active'\(above("patient_id", after))
            ORDER BY patient_id LIMIT \(Int64(limit)))
        ORDER BY s.patient_id, s.created_at
        """
    }

    static func sessions(_ userID: UUID, now: UnixMillis, after: String?, limit: Int) -> SQLStatement {
        let above: SQLStatement = after.map { " AND substr(s.token_hash, 1, 16) > \($0)" } ?? ""
        return """
            SELECT s.token_hash, s.device_name, s.created_at, s.last_used_at, s.expires_at FROM sessions s JOIN users u ON u.id = s.user_id
            WHERE s.user_id = \(userID) AND s.expires_at > \(now) AND s.credential_generation = u.credential_generation\(above)
            ORDER BY s.token_hash LIMIT \(Int64(limit))
            """
    }
}

/// The pages over either engine's `SQLStore`.
protocol SQLListingStore: ListingRepository, SQLStore {}

extension SQLListingStore {
    public func users(after: UUID?, status: AccountStatus?, limit: Int) async throws -> [UserRow] {
        try await rows(UserRow.self, ListingSQL.users(after: after, status: status, limit: limit))
    }

    public func shares(state: ShareState, after: UUID?, limit: Int) async throws -> [ShareRow] {
        try await rows(ShareRow.self, ListingSQL.shares(state: state, after: after, limit: limit))
    }

    public func patientShares(doctorID: UUID, patientsAfter after: UUID?, limit: Int) async throws -> [PatientShareRow] {
        try await rows(PatientShareRow.self, ListingSQL.patientShares(doctorID: doctorID, patientsAfter: after, limit: limit))
    }

    public func sessionEntries(userID: UUID, now: UnixMillis, after: String?, limit: Int) async throws -> [SessionEntry] {
        try await rows(SessionEntry.self, ListingSQL.sessions(userID, now: now, after: after, limit: limit))
    }
}

/// One active share in a doctor's patient list, with what the list shows beside it. No signed statement is
/// read: the list names patients and categories, and the doctor's tools verify the shares themselves.
public struct PatientShareRow: Sendable, Equatable, StoredRowDecodable {
    public var patientID: UUID
    public var tresorID: UUID
    public var category: String
    public var expiresAt: UnixMillis?
    public var updatedAt: UnixMillis
    /// nil when the patient's user row is gone.
    public var username: String?
    /// When the category last changed; nil when it has no record.
    public var lastChange: UnixMillis?

    init(stored r: some StoredRow) throws {
        patientID = try r.uuid("patient_id")
        tresorID = try r.uuid("tresor_id")
        category = try r.string("category")
        expiresAt = try r.optionalInt64("expires_at")
        updatedAt = try r.int64("updated_at")
        username = try r.optionalString("username")
        lastChange = try r.optionalInt64("last_change")
    }

    /// True when the share has ended by its expiry at `now`, whether or not `expireShares` has run.
    public func expired(at now: UnixMillis) -> Bool { expiresAt.map { $0 <= now } ?? false }
}
