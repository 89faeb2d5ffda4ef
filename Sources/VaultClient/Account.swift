import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// Where a client talks to and what it trusts: the server, the home folder, and the pinned admin key.
public struct ClientConfiguration: Sendable {
    /// The server's base URL.
    public var server: String
    /// The home folder of profiles.
    public var home: Home
    /// The pinned admin key: every certificate and approval must verify under it.
    public var adminKey: SigningPublicKey
    /// Argon2id parameters for new accounts (libsodium MODERATE by default).
    public var kdf: KDFParameters

    /// A configuration for `server` with profiles under `home`, trusting `adminKey`.
    public init(server: String, home: Home, adminKey: SigningPublicKey, kdf: KDFParameters = .moderate) {
        self.server = server
        self.home = home
        self.adminKey = adminKey
        self.kdf = kdf
    }
}

/// An unlocked account on this device: its profile, private keys and a session.
public struct UnlockedAccount: Sendable {
    /// What the device remembers of the account.
    public let profile: Profile
    /// The account's private keys, unwrapped.
    public let identity: Identity
    /// The account's certificate, verified under the pinned admin key.
    public let certificate: Certificate
    /// The password-derived wrapping key: encrypts the keyring at rest.
    public let wrappingKey: SymmetricKey
    /// The files of the account's profile folder.
    public let store: ProfileStore
    /// The session, if the device has one.
    public let session: StoredSession?
}

extension UnlockedAccount {
    /// The bearer credential of this account's session, or "not permitted" once it has expired.
    public var sessionAuth: Transport.Auth {
        get throws {
            guard let s = session, s.expiresAt > Date().unixMillis else {
                throw ClientError.notPermitted(code: .unauthorized, "the session has expired; log in again")
            }
            return .session(s.token)
        }
    }
}

/// Registration, login on any device, unlocking, logout (Docs/design.md §2).
public struct AccountManager: Sendable {
    /// Where to talk to and what to trust.
    public let configuration: ClientConfiguration
    /// The HTTP transport to the server.
    public let transport: Transport

    /// An account manager for `configuration`, talking through `transport`.
    public init(configuration: ClientConfiguration, transport: Transport) {
        self.configuration = configuration
        self.transport = transport
    }

    /// Makes keys, derives login and wrapping keys with Argon2id, wraps the key bundle and submits the
    /// signed registration. The account is pending until the admin approves it.
    public func register(username raw: String, password: String, role: Role) async throws -> RegisterResponse {
        let username: String
        do { username = try Username.normalize(raw) } catch { throw ClientError.invalidRequest("\(error)") }
        guard password.count >= 8 else { throw ClientError.invalidRequest("the password must have at least 8 characters") }
        let identity = Identity.generate()
        let salt = Salt.random()
        let keys = try PasswordKeys.derive(password: password, salt: salt, parameters: configuration.kdf)
        let request = try RegistrationRequest.make(
            identity: identity,
            username: username,
            role: role,
            passwordKeys: keys,
            kdf: configuration.kdf,
            salt: salt,
            requestedAt: Date().unixMillis
        )
        let response: RegisterResponse = try await transport.send(.POST, Routes.register, body: request)
        let store = configuration.home.store(server: configuration.server, username: username)
        try store.save(
            Profile(
                server: configuration.server,
                username: username,
                userID: identity.userID,
                role: role,
                deviceID: Self.newDeviceID(),
                certificate: nil,
                keyBundle: request.keyBundle
            )
        )
        try configuration.home.setCurrent(server: configuration.server, username: username)
        return response
    }

    /// Logs in (on this or a new device): fetches the KDF parameters (refusing weak ones), derives,
    /// proves the login key, unwraps the key bundle and checks the account's own certificate against the
    /// pinned admin key before trusting anything. With `remember`, keeps the wrapping key in a 0600 file.
    public func login(username raw: String, password: String, remember: Bool = false) async throws -> UnlockedAccount {
        let username = Username.lookupKey(raw)
        let params: LoginParametersResponse = try await transport.send(
            .POST,
            Routes.loginParameters,
            body: LoginParametersRequest(username: username)
        )
        let keys: PasswordKeys
        do { keys = try PasswordKeys.derive(password: password, salt: params.salt, parameters: params.kdf) } catch {
            throw ClientError.integrity("the server offered unacceptable password-hashing parameters: \(error)")
        }
        let request = LoginRequest(username: username, loginKey: Base64URL.encode(keys.loginKey.copyBytes()))
        let response: LoginResponse = try await transport.send(.POST, Routes.login, body: request)
        guard response.keyBundle.kdf == params.kdf, response.keyBundle.salt == params.salt, response.keyBundle.userID == response.userID else {
            throw ClientError.integrity("the key bundle does not match the parameters the server gave")
        }
        let identity: Identity
        do { identity = try response.keyBundle.open(wrappingKey: keys.wrappingKey) } catch { throw ClientError.from(error) }
        do {
            try response.certificate.verify(adminKey: configuration.adminKey, userID: response.userID, username: username, role: response.role)
        } catch { throw ClientError.integrity("the account certificate does not verify under the pinned admin key: \(error)") }
        guard response.certificate.signingKey == identity.signing.publicKey, response.certificate.boxKey == identity.box.publicKey else {
            throw ClientError.integrity("the certificate names other keys than the key bundle holds")
        }
        let store = configuration.home.store(server: configuration.server, username: username)
        let existing = try store.loadProfile()
        let profile = Profile(
            server: configuration.server,
            username: username,
            userID: response.userID,
            role: response.role,
            deviceID: existing?.userID == response.userID ? existing!.deviceID : Self.newDeviceID(),
            certificate: response.certificate,
            keyBundle: response.keyBundle
        )
        try store.save(profile)
        let session = StoredSession(token: response.token, expiresAt: response.expiresAt)
        try store.save(session)
        if remember { try store.saveDeviceKey(keys.wrappingKey) } else { SecureFiles.erase(store.deviceKeyURL) }
        try configuration.home.setCurrent(server: configuration.server, username: username)
        return UnlockedAccount(
            profile: profile,
            identity: identity,
            certificate: response.certificate,
            wrappingKey: keys.wrappingKey,
            store: store,
            session: session
        )
    }

    /// The current account's folder, or a clear error when nobody is logged in on this server.
    public func currentStore() throws -> ProfileStore {
        guard let store = try configuration.home.current(server: configuration.server), try store.loadProfile() != nil else {
            throw ClientError.localState("not logged in to \(configuration.server); run 'register' or 'login' first")
        }
        return store
    }

    /// Unlocks the current account with the remembered device key, or with the password.
    public func unlock(password: String?) throws -> UnlockedAccount {
        let store = try currentStore()
        guard let profile = try store.loadProfile() else { throw ClientError.localState("not logged in") }
        guard let certificate = profile.certificate else {
            throw ClientError.notPermitted(
                code: .pendingApproval,
                "account '\(profile.username)' is waiting for admin approval; run 'login' once it is approved"
            )
        }
        let wrappingKey: SymmetricKey
        if let remembered = try store.loadDeviceKey() {
            wrappingKey = remembered
        } else if let password {
            do {
                wrappingKey = try PasswordKeys.derive(password: password, salt: profile.keyBundle.salt, parameters: profile.keyBundle.kdf).wrappingKey
            } catch { throw ClientError.from(error) }
        } else {
            throw ClientError.notPermitted(code: nil, "a password is needed to unlock the keys (or log in with --remember)")
        }
        let identity: Identity
        do { identity = try profile.keyBundle.open(wrappingKey: wrappingKey) } catch { throw ClientError.from(error) }
        do { try certificate.verify(adminKey: configuration.adminKey, userID: profile.userID, role: profile.role) } catch {
            throw ClientError.integrity("stored certificate does not verify under the pinned admin key")
        }
        return UnlockedAccount(
            profile: profile,
            identity: identity,
            certificate: certificate,
            wrappingKey: wrappingKey,
            store: store,
            session: try store.loadSession()
        )
    }

    /// Ends the session on the server (best effort) and erases the session and remembered key here.
    public func logout() async throws {
        let store = try currentStore()
        if let session = try store.loadSession() {
            try? await transport.sendIgnoringBody(.POST, Routes.logout, auth: .session(session.token))
        }
        store.forgetSecrets()
    }

    static func newDeviceID() -> String { "dev-" + Hex.encode(RandomBytes.bytes(count: 8)) }
}
