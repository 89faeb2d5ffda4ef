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

    /// The KDF parameters of a username; stable fakes for unknown names, so they cannot be enumerated.
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
        let fake = try BLAKE2b.hash(Array(("fake-salt:" + name).utf8), key: SecureBytes(copying: secret), outputLength: 16)
        return LoginParametersResponse(kdf: .moderate, salt: try Salt(bytes: fake))
    }

    func login(_ r: LoginRequest, address: String) async throws -> LoginResponse {
        try Self.checkUsernameLength(r.username)
        let name = Username.lookupKey(r.username)
        let now = clock()
        if let wait = try await rateLimiter.retryAfter(username: name, address: address, now: now) {
            throw Self.tooManyRequests("too many failed logins", waitMs: wait)
        }
        guard r.loginKey.utf8.count == APILimits.key32Base64Length,
            let presented = (try? Base64URL.decode(r.loginKey)).flatMap({ $0.count == 32 ? $0 : nil })
        else {
            throw APIError.badRequest("loginKey must be 32 bytes of base64url")
        }
        let user = try await repository.user(username: name)
        let state = if let user { try await lifecycle.accountState(userID: user.id) } else { AccountState.none }
        let credentials = user.map { Self.credentials($0, state) }
        let expected = credentials.flatMap { try? Base64URL.decode($0.verifier) } ?? [UInt8](repeating: 0, count: 32)
        // Always hash, so an unknown username costs the same as a wrong password.
        let verifier = PasswordKeys.verifier(for: try SymmetricKey(bytes: presented))
        guard let user, ConstantTime.equals(verifier, expected) else {
            try await rateLimiter.recordFailure(username: name, address: address, now: now)
            // A name that matches no account is whatever the client typed: only its keyed hash goes
            // into the append-only log (enough to see repeated guesses at one name, nothing more).
            var details = ["address": address]
            if let user { details["username"] = user.username } else { details["usernameHash"] = try await unknownUsernameHash(name) }
            try await repository.appendAudit(
                [
                    AuditEvent(
                        actor: user.map { Self.idText($0.id) } ?? "unknown",
                        action: "login.failed",
                        patientID: user?.role == .patient ? user?.id : nil,
                        details: details
                    )
                ],
                now: now
            )
            throw APIError(.unauthorized, .invalidCredentials, "wrong username or password")
        }
        try await rateLimiter.recordSuccess(username: name, address: address, now: now)
        try Self.requireUsable(user, state, name: name)
        guard let certificate = user.certificate, let credentials else { throw APIError.internal }
        let deviceName = try Self.validDeviceName(r.deviceName)
        let token = Base64URL.encode(RandomBytes.bytes(count: 32))
        let expires = now + APILimits.sessionLifetimeMs
        let session = SessionRow(tokenHash: Self.tokenHash(token), userID: user.id, createdAt: now, expiresAt: expires)
        try await lifecycle.insertSession(session, deviceName: deviceName)
        try await repository.appendAudit(
            [
                AuditEvent(
                    actor: Self.idText(user.id),
                    action: "login",
                    patientID: user.role == .patient ? user.id : nil,
                    details: ["address": address]
                )
            ],
            now: now
        )
        return LoginResponse(
            token: token,
            expiresAt: expires,
            userID: user.id,
            role: user.role,
            keyBundle: credentials.bundle,
            certificate: certificate
        )
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
