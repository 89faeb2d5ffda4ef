/// Every HTTP route of the CareVault API (openapi.yaml at the repository root describes them).
/// Paths with a `{name}` part are built with the functions below; the server registers the same
/// functions with `:name` placeholders, so client and server cannot disagree on a path.
public enum Routes {
    public static let health = "/health"
    /// The deployment id that signed admin requests name (Docs/envelope-v1.md §3.5); open to anyone.
    public static let deployment = "/v1/deployment"
    public static let register = "/v1/accounts/register"
    public static let loginParameters = "/v1/auth/params"
    public static let login = "/v1/auth/login"
    public static let logout = "/v1/auth/logout"
    public static let me = "/v1/accounts/me"
    public static func userByName(_ username: String) -> String { "/v1/directory/users/\(username)" }
    public static func userByID(_ id: String) -> String { "/v1/directory/ids/\(id)" }

    public static let tresors = "/v1/tresors"
    public static let shares = "/v1/shares"
    public static func shareRevoke(_ id: String) -> String { "/v1/shares/\(id)/revoke" }
    public static func shareGrant(_ id: String) -> String { "/v1/shares/\(id)/grant" }
    public static let doctorPatients = "/v1/doctor/patients"
    public static let records = "/v1/records"
    public static let accessLog = "/v1/access-log"
    public static let accessLogCheckpoints = "/v1/access-log/checkpoints"
    public static let accessLogChain = "/v1/access-log/chain"

    public static let adminPending = "/v1/admin/pending"
    public static func adminApproveRegistration(_ id: String) -> String { "/v1/admin/registrations/\(id)/approve" }
    public static func adminRejectRegistration(_ id: String) -> String { "/v1/admin/registrations/\(id)/reject" }
    public static func adminApproveShare(_ id: String) -> String { "/v1/admin/shares/\(id)/approve" }
    public static func adminRejectShare(_ id: String) -> String { "/v1/admin/shares/\(id)/reject" }
    public static let adminUsers = "/v1/admin/users"
    public static let adminAudit = "/v1/admin/audit"
    public static let adminAuditVerify = "/v1/admin/audit/verify"
    public static let adminAuditCheckpoints = "/v1/admin/audit/checkpoints"

    // The account lifecycle (Docs/design.md §2).
    public static let passwordChange = "/v1/accounts/password"
    public static let deleteAccount = "/v1/accounts/delete"
    public static let recoveryRotate = "/v1/accounts/recovery"
    public static let recoveryBundle = "/v1/auth/recovery/bundle"
    public static let recover = "/v1/auth/recovery"
    public static let sessions = "/v1/sessions"
    public static let sessionsRevokeOthers = "/v1/sessions/revoke-others"
    public static func sessionRevoke(_ id: String) -> String { "/v1/sessions/\(id)/revoke" }
    public static func adminSuspend(_ id: String) -> String { "/v1/admin/users/\(id)/suspend" }
    public static func adminReinstate(_ id: String) -> String { "/v1/admin/users/\(id)/reinstate" }
}

/// Limits the server enforces and clients respect.
public enum APILimits {
    /// The largest request body accepted, in bytes.
    public static let maxBodyBytes = 32 * 1024 * 1024
    /// The largest admin request body: an approval is about 1 KiB, so 64 KiB leaves room and keeps what
    /// an unauthenticated caller can make the server hold small.
    public static let maxAdminBodyBytes = 64 * 1024
    /// The highest approval sequence number: what the schema's signed 64-bit columns store (2^63 − 1).
    /// The server refuses an approval above it and clients sign none (Docs/design.md §3).
    public static let maxApprovalSequence = UInt64(Int64.max)

    /// The approval sequence after `sequence`, checked: at `UInt64.max` it stays there, a number no one
    /// signs or stores, so a crafted offer ends in an error instead of a trap.
    public static func approvalSequence(after sequence: UInt64) -> UInt64 {
        let (next, overflow) = sequence.addingReportingOverflow(1)
        return overflow ? .max : next
    }
    /// The most envelopes in one push.
    public static let maxPushBatch = 2_000
    /// The largest ciphertext of one envelope, in bytes.
    public static let maxCiphertextBytes = 1 * 1024 * 1024
    /// The default and the largest page of a pull.
    public static let defaultPullLimit = 1_000
    public static let maxPullLimit = 5_000
    /// How far in the future a version's HLC may be, against the server's clock (12 hours): a device
    /// clock hours ahead still syncs, a clock years ahead is refused.
    public static let maxForwardDriftMs: UInt64 = 12 * 3_600 * 1_000
    /// How long a session token lives.
    public static let sessionLifetimeMs: Int64 = 12 * 3_600 * 1_000
    /// The most live sessions of one account: a login past it ends the oldest.
    public static let maxSessionsPerAccount = 20
    /// A successful login is audited once per account, client address and device name in this long.
    public static let loginAuditIntervalMs: Int64 = 3_600 * 1_000
    /// The largest body of a route open without a session (registration, login), in bytes: every
    /// field there has a small cap, so a larger body is never legitimate.
    public static let maxOpenBodyBytes = 64 * 1024
    /// The longest username, in characters (Username.normalize).
    public static let maxUsernameLength = 32
    /// The length of a 32-byte value (login key, login verifier) in unpadded base64url.
    public static let key32Base64Length = 43
    /// The longest key bundle ciphertext, in base64url characters; a real bundle is about 200.
    public static let maxKeyBundleCiphertextLength = 4096
    /// The default and the largest page of audit links (`GET /v1/access-log/chain`): each is about 150 bytes.
    public static let defaultLinkLimit = 5_000
    public static let maxLinkLimit = 10_000
    /// The default and the largest page of the listings that grow with the clinic (`GET /v1/admin/users`,
    /// `/v1/admin/pending` (per list), `/v1/doctor/patients`, `/v1/sessions`): a pending share with its two
    /// certificates is the largest item, about 2 KiB, so a full page stays near 2 MiB.
    public static let defaultListLimit = 200
    public static let maxListLimit = 1_000
}

/// The `Idempotency-Key` header of non-idempotent requests (Docs/design.md §6.2): a client sends one random
/// key per logical request and the same key on each retry of it; the server answers a retry with the
/// first answer instead of running the request again.
public enum Idempotency {
    /// The request header.
    public static let header = "Idempotency-Key"
    /// The response header set (to `true`) on an answer sent again from the store.
    public static let replayedHeader = "Idempotent-Replayed"
    /// Shortest and longest key accepted, in characters of `A-Z a-z 0-9 - _`.
    public static let keyLength = 16...64

    /// Whether `key` is a well-formed key.
    public static func isValid(_ key: String) -> Bool {
        keyLength.contains(key.utf8.count)
            && key.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2D || c == 0x5F
            }
    }
}
