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
    /// Raised by every credential change; a session made under another value is refused (Docs/design.md §2).
    /// Read in the same statement as the credentials, so a login knows which credentials it checked.
    public var credentialGeneration: Int64 = 0

    /// An account with nothing beyond its registration.
    public static let none = AccountState()
}

/// A session to open once its login key was checked, and what the opening transaction checks again
/// (Docs/design.md §2): the account must still be active, not suspended, and at the credential
/// generation the key was checked under, or nothing is stored.
public struct SessionOpening: Sendable {
    /// The session; its token hash is new.
    public var session: SessionRow
    /// The name its device gave.
    public var deviceName: String?
    /// The account's credential generation when the login key was checked.
    public var generation: Int64
    /// At most this many live sessions of the account once this one is open: the oldest end first.
    public var maxSessions: Int
    /// The login's audit entry, written unless a login of the same account, address and device name was
    /// audited since `auditMark`'s row was made: that row (in `login_throttle`, gone at `until`) marks it.
    public var audit: AuditEvent?
    /// The `login_throttle` key that marks this login's account, address and device name as audited, and
    /// until when; nil audits every time.
    public var auditMark: (key: String, until: UnixMillis)?

    /// An opening of `session` checked against `generation`.
    public init(
        session: SessionRow,
        deviceName: String?,
        generation: Int64,
        maxSessions: Int,
        audit: AuditEvent?,
        auditMark: (key: String, until: UnixMillis)?
    ) {
        self.session = session
        self.deviceName = deviceName
        self.generation = generation
        self.maxSessions = maxSessions
        self.audit = audit
        self.auditMark = auditMark
    }
}

/// Why a session was not opened: the account changed between the login's check and the opening.
public enum SessionRefused: Error, Equatable, Sendable {
    /// The account's credentials changed since the login key was checked.
    case credentialsChanged
    /// The account was suspended meanwhile.
    case suspended
    /// The account is not active (pending, rejected) or gone.
    case notActive
}

/// A session as the authenticator checks it, read with its account's state in one statement.
public struct SessionCheck: Sendable, Equatable {
    /// The session.
    public var session: SessionRow
    /// The credential generation the session was made under.
    public var sessionGeneration: Int64
    /// The account's credential generation now.
    public var accountGeneration: Int64
    /// When the account was suspended, if it is.
    public var suspendedAt: UnixMillis?
}

/// A credential change refused by the store (Docs/design.md §2, Docs/envelope-v1.md §2.4).
public enum CredentialChangeRefused: Error, Equatable, Sendable {
    /// The account's credentials changed since the proof was checked (another change won the race).
    case changedMeanwhile
    /// `changedAt` is not later than the stored change's, which is given.
    case notNewer(stored: UnixMillis)
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

/// The account lifecycle's storage, one area of `VaultRepository`, written once for both backends (`AccountFlow`).
public protocol AccountLifecycleRepository: Sendable {
    /// The account's lifecycle state (`.none` for an account without any).
    func accountState(userID: UUID) async throws -> AccountState
    /// Stores the recovery bundle and verifier of an account.
    func setRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis) async throws
    /// Replaces the recovery bundle and verifier of an account (a rotation), with its audit entry.
    func replaceRecovery(userID: UUID, _ enrollment: RecoveryEnrollment, now: UnixMillis, audit: AuditEvent) async throws
    /// Stores new password credentials, raises the account's credential generation and ends every session
    /// but `keeping` (which moves to the new generation), in one transaction. Throws
    /// `CredentialChangeRefused.changedMeanwhile` when the generation is no longer `expecting` (the proof was
    /// checked against older credentials) and `.notNewer` unless `update.changedAt` is later than the stored
    /// change's; nothing is stored then.
    func updateCredentials(
        userID: UUID,
        _ update: CredentialUpdate,
        expecting generation: Int64,
        keeping tokenHash: String?,
        now: UnixMillis,
        audit: AuditEvent
    ) async throws
    /// Opens a session in one transaction that checks the account again (`SessionOpening`), ends the
    /// oldest sessions past the cap and writes the audit entry; throws `SessionRefused`, storing nothing,
    /// when the account changed since its login key was checked.
    func openSession(_ opening: SessionOpening, now: UnixMillis) async throws
    /// The session of `tokenHash` with its account's generation and suspension, or nil.
    func sessionCheck(tokenHash: String) async throws -> SessionCheck?
    /// The account's live sessions (not expired, made under the current credentials), newest first.
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
            suspendReason: try r.optionalString("suspend_reason"),
            credentialGeneration: try r.int64("credential_generation")
        )
    }
}

extension SessionCheck: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(
            session: try SessionRow(stored: r),
            sessionGeneration: try r.int64("session_generation"),
            accountGeneration: try r.int64("account_generation"),
            suspendedAt: try r.optionalInt64("suspended_at")
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

/// The statements of accounts, sessions and the account lifecycle (Docs/design.md §2), written once for
/// both engines.
enum AccountSQL {
    /// An account's `AccountState` (a left join: the credentials row may be absent).
    static func state(_ userID: UUID) -> SQLStatement {
        """
        SELECT c.credential_update, c.recovery_bundle, c.recovery_verifier, u.suspended_at, u.suspend_reason, u.credential_generation
        FROM users u LEFT JOIN account_credentials c ON c.user_id = u.id WHERE u.id = \(userID)
        """
    }

    /// An account's sessions that are usable at `now`: not expired, made under the current credentials.
    static func liveSessions(_ userID: UUID, now: UnixMillis) -> SQLStatement {
        """
        SELECT s.token_hash, s.device_name, s.created_at, s.last_used_at, s.expires_at FROM sessions s JOIN users u ON u.id = s.user_id
        WHERE s.user_id = \(userID) AND s.expires_at > \(now) AND s.credential_generation = u.credential_generation
        ORDER BY s.created_at DESC, s.token_hash
        """
    }

    /// A session and its account's generation and suspension (`SessionCheck`), by token hash.
    static func sessionCheck(_ tokenHash: String) -> SQLStatement {
        """
        SELECT s.token_hash, s.user_id, s.created_at, s.expires_at, s.credential_generation AS session_generation,
               u.credential_generation AS account_generation, u.suspended_at
        FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = \(tokenHash)
        """
    }

    /// Sessions' last use is written at most this often, so reads do not each cost a write.
    static let touchIntervalMs: Int64 = 60_000

    static func touch(_ tokenHash: String, now: UnixMillis) -> SQLStatement {
        """
        UPDATE sessions SET last_used_at = \(now)
        WHERE token_hash = \(tokenHash) AND (last_used_at IS NULL OR last_used_at <= \(now - touchIntervalMs))
        """
    }

    /// Deletes the sessions `selection` names, returning one row per session deleted.
    static func deleteSessions(_ userID: UUID, _ selection: SessionSelection) -> SQLStatement {
        let which: SQLStatement =
            switch selection {
            case .all: ""
            case .allExcept(let keep): " AND token_hash <> \(keep)"
            case .id(let id): " AND substr(token_hash, 1, 16) = \(id)"
            }
        return "DELETE FROM sessions WHERE user_id = \(userID)\(which) RETURNING token_hash AS value"
    }

    /// The account's credentials row, made when it does not exist yet (`setColumn` then fills it).
    static func ensureCredentials(_ userID: UUID, now: UnixMillis) -> SQLStatement {
        "INSERT INTO account_credentials (user_id, updated_at) VALUES (\(userID), \(now)) ON CONFLICT (user_id) DO NOTHING"
    }

    /// One column of the credentials row; `column` is one of the code's fixed names.
    static func setCredential(_ userID: UUID, column: String, _ value: String?, now: UnixMillis) -> SQLStatement {
        "UPDATE account_credentials SET \(sql: column) = \(value), updated_at = \(now) WHERE user_id = \(userID)"
    }

    /// Deletes one owner, children before parents. The `account_deletions` row opens the versions'
    /// append-only guard for this owner only, and is gone again before the transaction commits. A rule for
    /// every path that deletes a `users` row: lock (on PostgreSQL, first insert) the owner's
    /// `owner_sequences` row and delete it in the same transaction; that lock is what orders a push
    /// before or after the deletion, and a push that finds the row gone stores nothing.
    static func deleteAccount(_ owner: UUID) -> [SQLStatement] {
        [
            "INSERT INTO account_deletions (owner_id) VALUES (\(owner))",
            "DELETE FROM heads WHERE owner_id = \(owner)",
            "DELETE FROM versions WHERE owner_id = \(owner)",
            "DELETE FROM account_deletions WHERE owner_id = \(owner)",
            "DELETE FROM owner_sequences WHERE owner_id = \(owner)",
            "DELETE FROM shares WHERE patient_id = \(owner)",
            "DELETE FROM tresor_commitments WHERE owner_id = \(owner)",
            "DELETE FROM tresor_states WHERE owner_id = \(owner)",
            "DELETE FROM tresors WHERE owner_id = \(owner)",
            "DELETE FROM sessions WHERE user_id = \(owner)",
            "DELETE FROM account_credentials WHERE user_id = \(owner)",
            "DELETE FROM users WHERE id = \(owner)",
        ]
    }

    /// What an account deletion removes, counted before.
    static func deletedCounts(_ owner: UUID) -> SQLStatement {
        """
        SELECT (SELECT count(*) FROM versions WHERE owner_id = \(owner)) AS versions,
               (SELECT count(*) FROM tresors WHERE owner_id = \(owner)) AS tresors,
               (SELECT count(*) FROM shares WHERE patient_id = \(owner)) AS shares
        """
    }
}

extension DeletedAccount: StoredRowDecodable {
    init(stored r: some StoredRow) throws {
        self.init(versions: Int(try r.int64("versions")), tresors: Int(try r.int64("tresors")), shares: Int(try r.int64("shares")))
    }
}
