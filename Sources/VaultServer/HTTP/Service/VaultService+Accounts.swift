import Foundation
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// Accounts and sessions (Docs/design.md §2): registration, login with rate limits, the directory.
extension VaultService {
    /// Counts a registration attempt from `address`, refusing it with 429 past the limit.
    func admitRegistration(address: String) throws {
        if let wait = registrationLimiter.attempt(address: address, now: clock()) {
            throw Self.tooManyRequests("too many registrations from this address", waitMs: wait)
        }
    }

    func register(_ submission: RegistrationSubmission) async throws -> (RegisterResponse, HTTPResponse.Status) {
        let r = submission.request
        try Self.checkSizes(r)
        if let recovery = submission.recovery { try Self.check(recovery, for: r.userID) }
        do { try r.verify() } catch {
            switch error {
            case .invalidSignature: throw APIError(.badRequest, .invalidSignature, "registration self-signature is not valid")
            default: throw APIError.badRequest("registration rejected: \(error.description)")
            }
        }
        let now = clock()
        let row = UserRow(
            id: r.userID,
            username: r.username,
            role: r.role,
            status: .pending,
            registration: r,
            certificate: nil,
            approval: nil,
            rejectReason: nil,
            createdAt: now,
            updatedAt: now
        )
        do {
            try await repository.insertUser(
                row,
                audit: AuditEvent(
                    actor: Self.idText(r.userID),
                    action: "account.registered",
                    patientID: r.role == .patient ? r.userID : nil,
                    details: ["username": r.username, "role": r.role.rawValue]
                )
            )
            if let recovery = submission.recovery { try await lifecycle.setRecovery(userID: r.userID, recovery, now: now) }
            return (RegisterResponse(userID: r.userID, status: .pending), .accepted)
        } catch RepositoryError.conflict {
            // Repeating the same registration is idempotent; anything else under that name or id is a conflict.
            if let existing = try await repository.user(username: r.username), existing.registration == r {
                // A repeat completes a registration whose recovery enrollment was not stored the first time.
                if let recovery = submission.recovery, existing.status == .pending,
                    try await lifecycle.accountState(userID: existing.id).recoveryVerifier == nil
                {
                    try await lifecycle.setRecovery(userID: existing.id, recovery, now: now)
                }
                return (RegisterResponse(userID: existing.id, status: existing.status), .ok)
            }
            throw APIError.conflict("username '\(r.username)' (or this user id) is already registered")
        }
    }

    /// Caps on what a registration stores, far below the body limit: a name, two 32-byte values and a
    /// key bundle of a few hundred bytes (fixed-size keys, salt and signature are checked by decoding).
    static func checkSizes(_ r: RegistrationRequest) throws {
        try checkUsernameLength(r.username)
        guard r.loginVerifier.utf8.count == APILimits.key32Base64Length else {
            throw APIError.badRequest("loginVerifier must be 32 bytes of base64url")
        }
        guard r.keyBundle.ciphertext.utf8.count <= APILimits.maxKeyBundleCiphertextLength else {
            throw APIError.badRequest("keyBundle.ciphertext must be at most \(APILimits.maxKeyBundleCiphertextLength) characters")
        }
    }

    /// No account has a longer name, so a longer one is malformed, not unknown.
    static func checkUsernameLength(_ name: String) throws {
        // Counted in code points, as JSON Schema's maxLength counts them.
        guard name.unicodeScalars.count <= APILimits.maxUsernameLength else {
            throw APIError.badRequest("username must be at most \(APILimits.maxUsernameLength) characters")
        }
    }

    /// The KDF parameters of a username; stable fakes for unknown names, so they cannot be enumerated. An
    /// account that changed its password answers with the change's signed parameters; so does a fake,
    /// for about half of the names (which half is fixed by the server secret), with every field derived
    /// from the name and the secret: an unknown name answers in the same shape as some account would.
    func loginParameters(username raw: String) async throws -> LoginParametersResponse {
        try Self.checkUsernameLength(raw)
        let name = Username.lookupKey(raw)
        if let user = try await repository.user(username: name) {
            // Only the signed parameters: the update's verifier and key bundle would let anyone guess offline.
            if let update = try await lifecycle.accountState(userID: user.id).credentialUpdate {
                return LoginParametersResponse(kdf: update.kdf, salt: update.salt, credentialParameters: update.parameters)
            }
            return LoginParametersResponse(kdf: user.registration.kdf, salt: user.registration.salt)
        }
        let secret = try await repository.serverSecret()
        func fake(_ label: String, _ count: Int) throws -> [UInt8] {
            try BLAKE2b.hash(Array((label + ":" + name).utf8), key: SecureBytes(copying: secret), outputLength: count)
        }
        let salt = try Salt(bytes: try fake("fake-salt", 16))
        guard try fake("fake-changed", 16)[0] & 1 == 1 else { return LoginParametersResponse(kdf: .moderate, salt: salt) }
        var id = try fake("fake-user", 16)
        id[6] = id[6] & 0x0f | 0x40  // a version 4 UUID, as `Identity.generate` makes
        id[8] = id[8] & 0x3f | 0x80
        let uuid = UUID(uuid: (id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14], id[15]))
        let offset = try fake("fake-changed-at", 16).prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % (730 * 86_400_000)
        let parameters = CredentialParameters(
            userID: uuid,
            kdf: .moderate,
            salt: salt,
            changedAt: Self.fakeChangesFrom + Int64(offset),
            signature: try Signature(bytes: try fake("fake-signature", 64))
        )
        return LoginParametersResponse(kdf: .moderate, salt: salt, credentialParameters: parameters)
    }

    /// The first instant of the fake password changes' two years (2023-01-01T00:00:00Z).
    static let fakeChangesFrom: UnixMillis = 1_672_531_200_000

    func login(_ r: LoginRequest, address: String) async throws -> LoginResponse {
        try Self.checkUsernameLength(r.username)
        let name = Username.lookupKey(r.username)
        let presented = try Self.keyBytes(r.loginKey, "loginKey")
        let deviceName = try Self.validDeviceName(r.deviceName)
        let now = clock()
        // The credentials and their generation in one read: the session opens only if they are still in force.
        let user = try await repository.user(username: name)
        let state = if let user { try await lifecycle.accountState(userID: user.id) } else { AccountState.none }
        // Admitted and counted before the key is checked: attempts sent together meet the back-off in turn.
        let attempt = try await admit(username: name, address: address, now: now, what: "logins")
        let credentials = user.map { Self.credentials($0, state) }
        // Always hash, so an unknown username costs the same as a wrong password.
        guard let user, Self.proves(presented, stored: credentials?.verifier, hash: Self.loginVerifier) else {
            try await rateLimiter.failed(attempt, now: now)
            // A name that matches no account is whatever the client typed: only its keyed hash goes
            // into the append-only log (enough to see repeated guesses at one name, nothing more).
            var details = ["address": address]
            if let user { details["username"] = user.username } else { details["usernameHash"] = try await unknownUsernameHash(name) }
            try await auditBatcher.append(
                AuditEvent(
                    actor: user.map { Self.idText($0.id) } ?? "unknown",
                    action: "login.failed",
                    patientID: user?.role == .patient ? user?.id : nil,
                    details: details
                ),
                now: now
            )
            throw APIError(.unauthorized, .invalidCredentials, "wrong username or password")
        }
        try await rateLimiter.succeeded(attempt, now: now)
        try Self.requireUsable(user, state, name: name)
        guard let certificate = user.certificate, let credentials else { throw APIError.internal }
        let token = Base64URL.encode(RandomBytes.bytes(count: 32))
        let expires = now + APILimits.sessionLifetimeMs
        let opening = SessionOpening(
            session: SessionRow(tokenHash: Self.tokenHash(token), userID: user.id, createdAt: now, expiresAt: expires),
            deviceName: deviceName,
            generation: state.credentialGeneration,
            maxSessions: APILimits.maxSessionsPerAccount,
            audit: AuditEvent(
                actor: Self.idText(user.id),
                action: "login",
                patientID: user.role == .patient ? user.id : nil,
                details: ["address": address]
            ),
            auditMark: (Self.loginAuditKey(user.id, address: address, deviceName: deviceName), now + APILimits.loginAuditIntervalMs)
        )
        do { try await lifecycle.openSession(opening, now: now) } catch let refused as SessionRefused {
            switch refused {
            case .credentialsChanged: throw APIError(.unauthorized, .invalidCredentials, "the password changed meanwhile; log in again")
            case .suspended: throw APIError(.forbidden, .forbidden, "account '\(name)' is suspended")
            case .notActive: throw APIError(.forbidden, .forbidden, "account '\(name)' is not active")
            }
        }
        return LoginResponse(
            token: token,
            expiresAt: expires,
            userID: user.id,
            role: user.role,
            keyBundle: credentials.bundle,
            certificate: certificate
        )
    }

    /// The `login_throttle` key that marks a login of `userID` from `address` with `deviceName` as audited:
    /// `l:` and a hash of the three, so neither the address nor the name is kept in clear beside the log.
    static func loginAuditKey(_ userID: UUID, address: String, deviceName: String?) -> String {
        var w = CanonicalWriter(domain: "CareVault-login-audit-mark-v1")
        w.append(userID)
        w.append(address)
        w.append(deviceName ?? "")
        return "l:" + Hex.encode(try! BLAKE2b.hash(w.bytes, outputLength: 16))
    }

    /// A device name as given at login, trimmed; at most 64 characters (nil when empty).
    static func validDeviceName(_ raw: String?) throws -> String? {
        guard let name = raw?.trimmingCharacters(in: .whitespacesAndNewlines), !name.isEmpty else { return nil }
        guard name.unicodeScalars.count <= 64 else { throw APIError.badRequest("deviceName must be at most 64 characters") }
        return name
    }

    /// The audit log's stand-in for a username that matches no account: BLAKE2b keyed with the server
    /// secret, 16 bytes in hex.
    func unknownUsernameHash(_ name: String) async throws -> String {
        let secret = try await repository.serverSecret()
        return Hex.encode(try BLAKE2b.hash(Array(("audit-username:" + name).utf8), key: SecureBytes(copying: secret), outputLength: 16))
    }

    func logout(_ caller: Caller) async throws {
        try await repository.deleteSession(tokenHash: caller.tokenHash)
        announceAccount(caller.id)
    }

    func directory(username: String? = nil, id: UUID? = nil) async throws -> DirectoryEntry {
        var user: UserRow?
        if let username { user = try await repository.user(username: Username.lookupKey(username)) }
        if let id { user = try await repository.user(id: id) }
        guard let user, user.status == .active, let cert = user.certificate else {
            throw APIError.notFound("no approved user \(username.map { "named '\($0)'" } ?? "with that id")")
        }
        return DirectoryEntry(certificate: cert)
    }
}
