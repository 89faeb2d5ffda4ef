import Foundation
import VaultAPI
import VaultCore

// MARK: Account lifecycle (Docs/design.md §2)

/// What an account holds besides its users row: credentials set after registration, the recovery
/// bundle, and a suspension.
public struct AccountState: Sendable, Equatable {
    /// The newest password change; nil while the registration's credentials hold.
    public var credentialUpdate: CredentialUpdate?
    /// The recovery bundle, when the account enrolled one.
    public var recoveryBundle: RecoveryBundle?
    /// Hash of the recovery login key, base64url.
    public var recoveryVerifier: String?
    /// When the admin suspended the account; nil when it is not suspended.
    public var suspendedAt: UnixMillis?
    /// The admin's reason.
    public var suspendReason: String?

    /// An account with nothing beyond its registration.
    public static let none = AccountState()
}

/// One stored session as the account's session list shows it.
public struct SessionEntry: Sendable, Equatable {
    /// The stored hash of the token.
    public var tokenHash: String
    /// The name the device gave at login.
    public var deviceName: String?
    /// When the session was made.
    public var createdAt: UnixMillis
    /// When it was last used, to the minute.
    public var lastUsedAt: UnixMillis?
    /// When it expires.
    public var expiresAt: UnixMillis
}

/// Which of an account's sessions to end.
public enum SessionSelection: Sendable, Equatable {
    /// Every session.
    case all
    /// Every session but the one with this token hash.
    case allExcept(tokenHash: String)
    /// The session whose token hash starts with this id (`SessionInfo.id`).
    case id(String)
}

/// The rows an account deletion removed.
public struct DeletedAccount: Sendable, Equatable {
    /// Record versions removed.
    public var versions: Int
    /// Tresors removed.
    public var tresors: Int
    /// Shares removed.
    public var shares: Int
}

/// The account lifecycle's storage; both backends implement it in their `+Accounts` files.
public protocol AccountLifecycleRepository: Sendable {
    /// The account's lifecycle state (`.none` for an account without any).
    func accountState(userID: UUID) async throws -> AccountState
    /// Stores the recovery bundle and verifier of an account.
    func setRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis) async throws
    /// Stores new password credentials and ends the account's sessions `ending`, in one transaction.
    func updateCredentials(userID: UUID, _ update: CredentialUpdate, ending: SessionSelection, now: UnixMillis, audit: AuditEvent) async throws
    /// Inserts a session with the name its device gave.
    func insertSession(_ session: SessionRow, deviceName: String?) async throws
    /// The account's live sessions, newest first.
    func sessionEntries(userID: UUID, now: UnixMillis) async throws -> [SessionEntry]
    /// Ends the account's sessions `selection` names; returns how many.
    func deleteSessions(userID: UUID, _ selection: SessionSelection) async throws -> Int
    /// Sets the session's last use to `now` unless it was set less than a minute ago.
    func touchSession(tokenHash: String, now: UnixMillis) async throws
    /// Suspends an account at `now` for `reason`, ending every session, or reinstates it (`reason` nil);
    /// `.notFound` for an unknown account.
    func setSuspension(userID: UUID, reason: String?, now: UnixMillis, audit: AuditEvent) async throws
    /// Removes a patient, their versions, heads, tresors, shares, sessions and credentials in one
    /// transaction; only the audit log keeps the fact. `.notFound("account")` when there is no such
    /// account (a second deletion at the same time), with nothing audited.
    func deleteAccount(userID: UUID, now: UnixMillis, audit: AuditEvent) async throws -> DeletedAccount
}

extension SessionEntry {
    /// The public id of a session: the first 16 hex digits of its token hash.
    public var id: String { String(tokenHash.prefix(16)) }
}

extension AccountState: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(
            credentialUpdate: try r.optionalJSON(CredentialUpdate.self, "credential_update"),
            recoveryBundle: try r.optionalJSON(RecoveryBundle.self, "recovery_bundle"),
            recoveryVerifier: try r.optionalString("recovery_verifier"),
            suspendedAt: try r.optionalInt64("suspended_at"),
            suspendReason: try r.optionalString("suspend_reason")
        )
    }
}

extension SessionEntry: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(
            tokenHash: try r.string("token_hash"),
            deviceName: try r.optionalString("device_name"),
            createdAt: try r.int64("created_at"),
            lastUsedAt: try r.optionalInt64("last_used_at"),
            expiresAt: try r.int64("expires_at")
        )
    }
}

/// The query that reads `AccountState` from both backends (a left join: the credentials row may be absent).
enum AccountStateSQL {
    static let select = """
        SELECT c.credential_update, c.recovery_bundle, c.recovery_verifier, u.suspended_at, u.suspend_reason
        FROM users u LEFT JOIN account_credentials c ON c.user_id = u.id WHERE u.id =
        """
    /// Sessions' last use is written at most this often, so reads do not each cost a write.
    static let touchIntervalMs: Int64 = 60_000

    /// Deletes one owner (`$1`), children before parents. The `account_deletions` row opens the versions'
    /// append-only guard for this owner only, and is gone again before the transaction commits. A rule for
    /// every path that deletes a `users` row: lock (on PostgreSQL, first insert) the owner's
    /// `owner_sequences` row and delete it in the same transaction; that lock is what orders a push
    /// before or after the deletion, and a push that finds the row gone stores nothing.
    static let deleteAccount = [
        "INSERT INTO account_deletions (owner_id) VALUES ($1)",
        "DELETE FROM heads WHERE owner_id = $1",
        "DELETE FROM versions WHERE owner_id = $1",
        "DELETE FROM account_deletions WHERE owner_id = $1",
        "DELETE FROM owner_sequences WHERE owner_id = $1",
        "DELETE FROM shares WHERE patient_id = $1",
        "DELETE FROM tresor_commitments WHERE owner_id = $1",
        "DELETE FROM tresors WHERE owner_id = $1",
        "DELETE FROM sessions WHERE user_id = $1",
        "DELETE FROM account_credentials WHERE user_id = $1",
        "DELETE FROM users WHERE id = $1",
    ]
}
