import Foundation
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// The account lifecycle (Docs/design.md §2): password change, recovery, sessions, deletion, suspension.
extension VaultService {
    /// The repository's lifecycle storage, one of the areas every repository provides.
    var lifecycle: any AccountLifecycleRepository { repository }

    /// The password credentials in force: the newest change, else the registration's.
    static func credentials(_ user: UserRow, _ state: AccountState) -> (verifier: String, bundle: KeyBundle) {
        if let u = state.credentialUpdate { return (u.loginVerifier, u.keyBundle) }
        return (user.registration.loginVerifier, user.registration.keyBundle)
    }

    /// The 32 bytes of a presented key (base64url), or 400 naming `field`: a malformed key is neither
    /// checked nor counted.
    static func keyBytes(_ presented: String, _ field: String) throws -> [UInt8] {
        guard presented.utf8.count == APILimits.key32Base64Length,
            let bytes = (try? Base64URL.decode(presented)).flatMap({ $0.count == 32 ? $0 : nil })
        else { throw APIError.badRequest("\(field) must be 32 bytes of base64url") }
        return bytes
    }

    /// Whether a presented 32-byte key hashes to `stored` under `hash`; always hashes, so an unknown
    /// account costs the same as a wrong key.
    static func proves(_ bytes: [UInt8], stored: String?, hash: ([UInt8]) -> [UInt8]) -> Bool {
        let expected = stored.flatMap { try? Base64URL.decode($0) } ?? [UInt8](repeating: 0, count: 32)
        return ConstantTime.equals(hash(bytes), expected) && stored != nil
    }

    /// Admits an attempt to prove a key of `username` (a login, a recovery key, a session's password
    /// check) under the login back-off and the account's successful-login cap, or answers 429.
    func admit(username: String, address: String, now: UnixMillis, what: String, capped: Bool = true) async throws -> LoginRateLimiter.Attempt {
        do {
            return try await rateLimiter.admit(username: username, address: address, now: now, capped: capped)
        } catch let refusal as LoginRateLimiter.Refusal {
            switch refusal {
            case .backOff(let wait): throw Self.tooManyRequests("too many failed \(what)", waitMs: wait)
            case .tooManySuccesses(let wait): throw Self.tooManyRequests("too many logins to this account", waitMs: wait)
            }
        }
    }

    /// Checks a key of the caller's account (`field`, hashed by `hash` and compared with `stored`) under
    /// the login back-off, or answers 401 with `wrong`: a stolen session alone proves nothing.
    func proveKey(
        of caller: Caller,
        _ presented: String,
        field: String,
        stored: String?,
        hash: ([UInt8]) -> [UInt8],
        wrong: String,
        address: String
    ) async throws {
        let bytes = try Self.keyBytes(presented, field)
        let now = clock()
        let attempt = try await admit(username: caller.user.username, address: address, now: now, what: "attempts")
        guard Self.proves(bytes, stored: stored, hash: hash) else {
            try await rateLimiter.failed(attempt, now: now)
            throw APIError(.unauthorized, .invalidCredentials, wrong)
        }
        try await rateLimiter.succeeded(attempt, now: now)
    }

    /// Checks the caller's current login key (the password), as `proveKey` does.
    func proveCurrentPassword(_ caller: Caller, _ key: String, _ state: AccountState, address: String) async throws {
        let current = Self.credentials(caller.user, state)
        try await proveKey(
            of: caller,
            key,
            field: "currentLoginKey",
            stored: current.verifier,
            hash: Self.loginVerifier,
            wrong: "the current password is wrong",
            address: address
        )
    }

    /// Stores new credentials proven against `state`'s generation, answering 409 when another change
    /// committed since or `changedAt` does not move forward (Docs/envelope-v1.md §2.4).
    func updateCredentials(
        _ userID: UUID,
        _ update: CredentialUpdate,
        state: AccountState,
        keeping tokenHash: String?,
        audit: AuditEvent
    ) async throws {
        do {
            try await lifecycle.updateCredentials(
                userID: userID,
                update,
                expecting: state.credentialGeneration,
                keeping: tokenHash,
                now: clock(),
                audit: audit
            )
        } catch let refused as CredentialChangeRefused {
            switch refused {
            case .changedMeanwhile: throw APIError.conflict("the credentials changed meanwhile; log in again and retry")
            case .notNewer(let stored):
                throw APIError.conflict("changedAt (\(update.changedAt)) must be later than the current credentials' (\(stored))")
            }
        }
    }

    /// Checks new credentials of `user`: signed by the account's own key, a well-formed verifier and bundle.
    func check(_ update: CredentialUpdate, of user: UserRow) throws {
        guard let certificate = user.certificate else { throw APIError.forbidden("the account is not approved") }
        // Changes only move forward in time: one dated far ahead (signed by whoever holds the password, or by a
        // device whose clock runs ahead) would block every later change and recovery of the account.
        let (latest, overflow) = clock().addingReportingOverflow(Int64(APILimits.maxForwardDriftMs))
        guard overflow || update.changedAt <= latest else {
            throw APIError.badRequest("changedAt is more than \(APILimits.maxForwardDriftMs / 3_600_000) hours ahead of the server's clock")
        }
        guard update.userID == user.id, update.isValid(signedBy: certificate.signingKey) else {
            throw APIError(.badRequest, .invalidSignature, "the new credentials are not signed by this account's key")
        }
        guard let parameters = update.parameters, parameters.describe(update), parameters.isValid(signedBy: certificate.signingKey) else {
            throw APIError(.badRequest, .invalidSignature, "the new credentials need their parameters signed by this account's key")
        }
        guard update.loginVerifier.utf8.count == APILimits.key32Base64Length else {
            throw APIError.badRequest("loginVerifier must be 32 bytes of base64url")
        }
        guard update.keyBundle.ciphertext.utf8.count <= APILimits.maxKeyBundleCiphertextLength else {
            throw APIError.badRequest("keyBundle.ciphertext must be at most \(APILimits.maxKeyBundleCiphertextLength) characters")
        }
    }

    /// Checks a recovery enrollment's sizes and that it names the registering account.
    static func check(_ recovery: RecoveryEnrollment, for userID: UUID) throws {
        guard recovery.bundle.userID == userID, recovery.bundle.version == 1 else {
            throw APIError.badRequest("the recovery bundle names another account or version")
        }
        guard recovery.verifier.utf8.count == APILimits.key32Base64Length,
            recovery.bundle.ciphertext.utf8.count <= APILimits.maxKeyBundleCiphertextLength
        else { throw APIError.badRequest("the recovery bundle or verifier has the wrong size") }
    }

    /// `POST /v1/accounts/password`: the session and the current login key, then new credentials; every
    /// other session ends, and one made with the old credentials while this committed is refused.
    func changePassword(_ caller: Caller, _ r: PasswordChangeRequest, address: String) async throws {
        let state = try await lifecycle.accountState(userID: caller.id)
        try await proveCurrentPassword(caller, r.currentLoginKey, state, address: address)
        try check(r.update, of: caller.user)
        let event = AuditEvent(
            actor: Self.idText(caller.id),
            action: "account.password-changed",
            patientID: caller.user.role == .patient ? caller.id : nil
        )
        try await updateCredentials(caller.id, r.update, state: state, keeping: caller.tokenHash, audit: event)
        announceAccount(caller.id)
    }

    static func loginVerifier(_ key: [UInt8]) -> [UInt8] { PasswordKeys.verifier(for: try! SymmetricKey(bytes: key)) }

    /// The hash the server keeps of a recovery login key (Docs/envelope-v1.md §2.3).
    public static func recoveryVerifier(_ key: [UInt8]) -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-recovery-verifier-v1")
        w.append(key)
        defer { w.wipe() }
        return try! BLAKE2b.hash(w.bytes)
    }

    /// The account a recovery proof opens, or 401 alike for an unknown name, no recovery bundle or a wrong
    /// key, admitted and counted by the login rate limiter.
    func provenRecovery(_ p: RecoveryProof, address: String) async throws -> (UserRow, AccountState) {
        try Self.checkUsernameLength(p.username)
        let name = Username.lookupKey(p.username)
        let bytes = try Self.keyBytes(p.recoveryLoginKey, "recoveryLoginKey")
        let now = clock()
        let user = try await repository.user(username: name)
        let state: AccountState? = if let user { try await lifecycle.accountState(userID: user.id) } else { nil }
        // Not under the successful-login cap: a password holder using it up must not close the owner's way back.
        let attempt = try await admit(username: name, address: address, now: now, what: "attempts", capped: false)
        guard Self.proves(bytes, stored: state?.recoveryVerifier, hash: Self.recoveryVerifier), let user, let state else {
            try await rateLimiter.failed(attempt, now: now)
            throw APIError(.unauthorized, .invalidCredentials, "wrong username or recovery key")
        }
        try await rateLimiter.succeeded(attempt, now: now)
        try Self.requireUsable(user, state, name: name)
        return (user, state)
    }

    /// Refuses a login or recovery into an account that is not approved or is suspended.
    static func requireUsable(_ user: UserRow, _ state: AccountState, name: String) throws {
        switch user.status {
        case .pending: throw APIError(.forbidden, .pendingApproval, "account '\(name)' is waiting for admin approval")
        case .rejected: throw APIError(.forbidden, .accountRejected, "account '\(name)' was rejected: \(user.rejectReason ?? "no reason given")")
        case .active: break
        }
        if state.suspendedAt != nil {
            throw APIError(.forbidden, .forbidden, "account '\(name)' is suspended: \(state.suspendReason ?? "no reason given")")
        }
        guard user.certificate != nil else { throw APIError.internal }
    }

    /// `POST /v1/auth/recovery/bundle`.
    func recoveryBundle(_ p: RecoveryProof, address: String) async throws -> RecoveryBundleResponse {
        let (user, state) = try await provenRecovery(p, address: address)
        guard let bundle = state.recoveryBundle, let certificate = user.certificate else { throw APIError.internal }
        return RecoveryBundleResponse(userID: user.id, role: user.role, bundle: bundle, certificate: certificate)
    }

    /// `POST /v1/auth/recovery`: new credentials with the recovery key; every session ends.
    func recover(_ r: RecoveryRequest, address: String) async throws {
        let (user, state) = try await provenRecovery(r.proof, address: address)
        try check(r.update, of: user)
        let event = AuditEvent(
            actor: Self.idText(user.id),
            action: "account.recovered",
            patientID: user.role == .patient ? user.id : nil,
            details: ["address": address]
        )
        try await updateCredentials(user.id, r.update, state: state, keeping: nil, audit: event)
        announceAccount(user.id)
    }

    /// `POST /v1/accounts/recovery`: a new recovery key's bundle and verifier replace the old ones, proven
    /// by the session and the current login key; the old recovery key stops working at once.
    func rotateRecovery(_ caller: Caller, _ r: RecoveryRotationRequest, address: String) async throws {
        try Self.check(r.recovery, for: caller.id)
        let state = try await lifecycle.accountState(userID: caller.id)
        try await proveCurrentPassword(caller, r.currentLoginKey, state, address: address)
        // The password alone must not replace the recovery key: whoever learned it could otherwise take the
        // owner's way back away for good (a password change is undone by a recovery; this would not be).
        if let verifier = state.recoveryVerifier {
            guard let current = r.currentRecoveryLoginKey else {
                throw APIError.badRequest(
                    "currentRecoveryLoginKey is required: the account has a recovery key, and the password alone cannot replace it"
                )
            }
            try await proveKey(
                of: caller,
                current,
                field: "currentRecoveryLoginKey",
                stored: verifier,
                hash: Self.recoveryVerifier,
                wrong: "the current recovery key is wrong",
                address: address
            )
        }
        let event = AuditEvent(
            actor: Self.idText(caller.id),
            action: "account.recovery-key-replaced",
            patientID: caller.user.role == .patient ? caller.id : nil
        )
        try await lifecycle.replaceRecovery(userID: caller.id, r.recovery, now: clock(), audit: event)
    }

    /// `GET /v1/sessions`: a page of the caller's live sessions, by id (Docs/design.md §6.1).
    func sessions(_ caller: Caller, after: String?, limit: Int) async throws -> SessionList {
        if let after { try Self.checkSessionID(after) }
        let clamped = Self.listLimit(limit)
        let entries = try await repository.sessionEntries(userID: caller.id, now: clock(), after: after, limit: clamped + 1)
        let page = entries.prefix(clamped).map {
            SessionInfo(
                id: $0.id,
                deviceName: $0.deviceName,
                createdAt: $0.createdAt,
                lastUsedAt: $0.lastUsedAt,
                expiresAt: $0.expiresAt,
                current: $0.tokenHash == caller.tokenHash
            )
        }
        return SessionList(sessions: page, nextCursor: page.last?.id ?? after, done: entries.count <= clamped)
    }

    /// A session id as `SessionInfo.id` gives it: 16 lower-case hex digits, else a 400.
    static func checkSessionID(_ id: String) throws {
        guard id.count == 16, id.allSatisfy({ $0.isHexDigit && !$0.isUppercase }) else {
            throw APIError.badRequest("a session id is 16 lower-case hex digits")
        }
    }

    /// `POST /v1/sessions/{id}/revoke` (one session of the caller's) and `/v1/sessions/revoke-others`.
    func revokeSessions(_ caller: Caller, id: String?) async throws -> RevokedSessions {
        let selection: SessionSelection
        if let id {
            try Self.checkSessionID(id)
            selection = .id(id)
        } else {
            selection = .allExcept(tokenHash: caller.tokenHash)
        }
        let n = try await lifecycle.deleteSessions(userID: caller.id, selection)
        if id != nil, n == 0 { throw APIError.notFound("no session with that id") }
        announceAccount(caller.id)
        return RevokedSessions(revoked: n)
    }

    /// Records that the caller's session was used (at most once a minute).
    func touch(_ caller: Caller) async throws {
        let now = clock()
        guard sessionTouches.shouldRecord(caller.tokenHash, now: now, interval: AccountSQL.touchIntervalMs) else { return }
        try await lifecycle.touchSession(tokenHash: caller.tokenHash, now: now)
    }

    /// `POST /v1/accounts/delete`: proven by the current login key or the recovery key besides the session,
    /// a patient's records, tresors, shares, sessions and account go; the audit log keeps the fact and the counts.
    func deleteAccount(_ caller: Caller, _ r: DeleteAccountRequest, address: String) async throws -> DeleteAccountResponse {
        try require(caller, role: .patient)
        guard Username.lookupKey(r.confirmUsername) == caller.user.username else {
            throw APIError.badRequest("confirmUsername does not name this account")
        }
        let state = try await repository.accountState(userID: caller.id)
        switch (r.currentLoginKey, r.recoveryLoginKey) {
        case (let key?, nil): try await proveCurrentPassword(caller, key, state, address: address)
        case (nil, let key?):
            try await proveKey(
                of: caller,
                key,
                field: "recoveryLoginKey",
                stored: state.recoveryVerifier,
                hash: Self.recoveryVerifier,
                wrong: "the recovery key is wrong",
                address: address
            )
        default:
            throw APIError.badRequest("deleting an account needs currentLoginKey or recoveryLoginKey (one of them): a session alone is not enough")
        }
        var event = Self.patientEvent(caller, "account.deleted", ["username": caller.user.username])
        let now = clock()
        let shares = try await repository.shares(patientID: caller.id)
        event.details["sharesEnded"] = String(shares.count)
        let d = try await repository.deleteAccount(userID: caller.id, now: now, audit: event)
        announceAccount(caller.id)
        // The shares went with the account: each doctor that was party to a pending or active one hears so.
        for row in shares where row.state == .pending || row.state == .active {
            events.publish(.share(id: row.id, patient: row.patientID, doctor: row.doctorID, state: .revoked, approved: row.approval != nil))
        }
        return DeleteAccountResponse(versions: d.versions, tresors: d.tresors, shares: d.shares)
    }

    /// `POST /v1/admin/users/{id}/suspend`.
    func suspend(_ id: UUID, _ r: SuspendRequest) async throws -> SuspensionResponse {
        let reason = try validReason(r.reason)
        guard let user = try await repository.user(id: id) else { throw APIError.notFound("no such user") }
        let event = Self.adminEvent("account.suspended", patientID: user.role == .patient ? id : nil, ["username": user.username, "reason": reason])
        let now = clock()
        try await lifecycle.setSuspension(userID: id, reason: reason, now: now, audit: event)
        announceAccount(id)
        return SuspensionResponse(userID: id, username: user.username, suspendedAt: now, reason: reason)
    }

    /// `POST /v1/admin/users/{id}/reinstate`.
    func reinstate(_ id: UUID, _ r: EmptyAdminBody) async throws -> SuspensionResponse {
        guard let user = try await repository.user(id: id) else { throw APIError.notFound("no such user") }
        let event = Self.adminEvent("account.reinstated", patientID: user.role == .patient ? id : nil, ["username": user.username])
        try await lifecycle.setSuspension(userID: id, reason: nil, now: clock(), audit: event)
        return SuspensionResponse(userID: id, username: user.username, suspendedAt: nil, reason: nil)
    }
}

/// The body of an admin request that carries nothing but its signature.
struct EmptyAdminBody: Decodable {}
