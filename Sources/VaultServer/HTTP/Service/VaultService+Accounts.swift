import Foundation
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// Accounts and sessions (Docs/design.md §2): registration, login with rate limits, the directory.
extension VaultService {
    func register(_ r: RegistrationRequest) async throws -> (RegisterResponse, HTTPResponse.Status) {
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
            return (RegisterResponse(userID: r.userID, status: .pending), .accepted)
        } catch RepositoryError.conflict {
            // Repeating the same registration is idempotent; anything else under that name or id is a conflict.
            if let existing = try await repository.user(username: r.username), existing.registration == r {
                return (RegisterResponse(userID: existing.id, status: existing.status), .ok)
            }
            throw APIError.conflict("username '\(r.username)' (or this user id) is already registered")
        }
    }

    /// The KDF parameters of a username; stable fakes for unknown names, so they cannot be enumerated.
    func loginParameters(username raw: String) async throws -> LoginParametersResponse {
        let name = Username.lookupKey(raw)
        if let user = try await repository.user(username: name) {
            return LoginParametersResponse(kdf: user.registration.kdf, salt: user.registration.salt)
        }
        let secret = try await repository.serverSecret()
        let fake = try BLAKE2b.hash(Array(("fake-salt:" + name).utf8), key: SecureBytes(copying: secret), outputLength: 16)
        return LoginParametersResponse(kdf: .moderate, salt: try Salt(bytes: fake))
    }

    func login(_ r: LoginRequest, address: String) async throws -> LoginResponse {
        let name = Username.lookupKey(r.username)
        let now = clock()
        if let wait = rateLimiter.retryAfter(username: name, address: address, now: now) {
            var e = APIError(.tooManyRequests, .rateLimited, "too many failed logins; retry in \(wait / 1000 + 1) seconds")
            e.headers[.retryAfter] = String(wait / 1000 + 1)
            throw e
        }
        guard let presented = (try? Base64URL.decode(r.loginKey)).flatMap({ $0.count == 32 ? $0 : nil }) else {
            throw APIError.badRequest("loginKey must be 32 bytes of base64url")
        }
        let user = try await repository.user(username: name)
        let expected = user.flatMap { try? Base64URL.decode($0.registration.loginVerifier) } ?? [UInt8](repeating: 0, count: 32)
        // Always hash, so an unknown username costs the same as a wrong password.
        let verifier = PasswordKeys.verifier(for: try SymmetricKey(bytes: presented))
        guard let user, ConstantTime.equals(verifier, expected) else {
            rateLimiter.recordFailure(username: name, address: address, now: now)
            try await repository.appendAudit(
                [
                    AuditEvent(
                        actor: user.map { Self.idText($0.id) } ?? "unknown",
                        action: "login.failed",
                        patientID: user?.role == .patient ? user?.id : nil,
                        details: ["username": name, "address": address]
                    )
                ],
                now: now
            )
            throw APIError(.unauthorized, .invalidCredentials, "wrong username or password")
        }
        rateLimiter.recordSuccess(username: name)
        switch user.status {
        case .pending: throw APIError(.forbidden, .pendingApproval, "account '\(name)' is waiting for admin approval")
        case .rejected: throw APIError(.forbidden, .accountRejected, "account '\(name)' was rejected: \(user.rejectReason ?? "no reason given")")
        case .active: break
        }
        guard let certificate = user.certificate else { throw APIError.internal }
        let token = Base64URL.encode(RandomBytes.bytes(count: 32))
        let expires = now + APILimits.sessionLifetimeMs
        try await repository.insertSession(SessionRow(tokenHash: Self.tokenHash(token), userID: user.id, createdAt: now, expiresAt: expires))
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
            keyBundle: user.registration.keyBundle,
            certificate: certificate
        )
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
