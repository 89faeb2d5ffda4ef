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
    /// The files of the account's profile folder.
    public let store: ProfileStore
    /// The session, if the device has one.
    public let session: StoredSession?
}

extension UnlockedAccount {
    static let localStorageContext = try! KDFContext("CVlocal_")

    /// Encrypts what this device keeps of the account (the keyring). A subkey of the record-id key
    /// (Docs/envelope-v1.md §2), so it exists after a password unlock and a remembered-key unlock alike,
    /// and neither the password nor anything derived from it is needed to make it.
    public var localStorageKey: SymmetricKey { identity.recordIDKey.deriveSubkey(id: 1, context: Self.localStorageContext) }

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

    /// Makes keys, derives login and wrapping keys with Argon2id (from the password's NFC form), wraps the
    /// key bundle and submits the signed registration. The account is pending until the admin approves it.
    public func register(username raw: String, password: String, role: Role) async throws -> RegisterResponse {
        try await registerWithRecovery(username: raw, password: password, role: role).response
    }

    /// Registers as `register` does, and enrolls a new recovery key: its bundle and verifier go to the
    /// server, the key itself only to the caller, to be shown once (Docs/envelope-v1.md §2.3).
    public func registerWithRecovery(username raw: String, password: String, role: Role) async throws -> Registration {
        let username: String
        do { username = try Username.normalize(raw) } catch { throw ClientError.invalidRequest("\(error)") }
        guard password.count >= 8 else { throw ClientError.invalidRequest("the password must have at least 8 characters") }
        let identity = Identity.generate()
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: password, salt: salt, parameters: configuration.kdf)
        let request = try RegistrationRequest.make(
            identity: identity,
            username: username,
            role: role,
            passwordKeys: keys,
            kdf: configuration.kdf,
            salt: salt,
            requestedAt: Date().unixMillis
        )
        let recoveryKey = RecoveryKey.generate()
        let recovery = RecoveryEnrollment(bundle: .seal(identity, recoveryKey: recoveryKey), verifier: recoveryKey.verifier)
        let submission = RegistrationSubmission(request: request, recovery: recovery)
        let response = try await transport.send(AccountEndpoints.register, submission)
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
        return Registration(response: response, recoveryKey: recoveryKey, fingerprint: AdminClient.fingerprint(request))
    }

    /// Logs in (on this or a new device): fetches the KDF parameters (refusing weak ones, and any that
    /// differ from what this device stored for the account, before any work), derives, proves the login
    /// key, unwraps the key bundle and checks the account's own certificate against the pinned admin key
    /// before trusting anything. With `remember`, keeps a random device key and a copy of the private keys
    /// sealed under it (Docs/envelope-v1.md §2.2); without, erases any.
    public func login(username raw: String, password: String, remember: Bool = false, deviceName: String? = nil) async throws -> UnlockedAccount {
        try await login(username: raw, password: password, remember: remember, deviceName: deviceName, expecting: nil)
    }

    /// `login`, deriving only under `expected` parameters and salt when given (the ones this device just
    /// chose for a new password): whatever else the server offers is refused.
    func login(
        username raw: String,
        password: String,
        remember: Bool = false,
        deviceName: String? = nil,
        expecting expected: (KDFParameters, Salt)?
    ) async throws -> UnlockedAccount {
        let username = Username.lookupKey(raw)
        let store = configuration.home.store(server: configuration.server, username: username)
        let existing = try store.loadProfile()
        let offered = try await transport.send(
            AccountEndpoints.loginParameters.answer(as: OfferedParameters.self),
            LoginParametersRequest(username: username)
        )
        let (kdf, salt) = try offered.check(against: existing, username: username, folder: store.folder.path, expecting: expected)
        let (keys, response) = try await proveLogin(username: username, password: password, kdf: kdf, salt: salt, deviceName: deviceName)
        let identity = try checked(response, keys: keys, kdf: kdf, salt: salt, username: username)
        let known = existing?.userID == response.userID ? existing : nil
        let profile = Profile(
            server: configuration.server,
            username: username,
            userID: response.userID,
            role: response.role,
            deviceID: known?.deviceID ?? Self.newDeviceID(),
            certificate: response.certificate,
            keyBundle: response.keyBundle,
            credentialParameters: offered.newestChange(
                stored: known?.credentialParameters,
                kdf: kdf,
                salt: salt,
                userID: response.userID,
                certificate: response.certificate
            )
        )
        try store.save(profile)
        let session = StoredSession(token: response.token, expiresAt: response.expiresAt)
        try store.save(session)
        if remember { try store.remember(identity, server: configuration.server) } else { store.forgetDevice() }
        try configuration.home.setCurrent(server: configuration.server, username: username)
        let account = UnlockedAccount(profile: profile, identity: identity, certificate: response.certificate, store: store, session: session)
        try Keyring.migrate(at: store.keyringURL, from: keys.wrappingKey, to: account.localStorageKey, ownerID: profile.userID)
        return account
    }

    /// Checks a login answer before anything of it is trusted: the key bundle names the parameters and salt
    /// derived under and the answering user, opens with the derived wrapping key, and the account's
    /// certificate verifies under the pinned admin key for that user, `username` and role and names the keys
    /// the bundle holds. Returns the unwrapped keys.
    func checked(_ response: LoginResponse, keys: PasswordKeys, kdf: KDFParameters, salt: Salt, username: String) throws -> Identity {
        guard response.keyBundle.kdf == kdf, response.keyBundle.salt == salt, response.keyBundle.userID == response.userID else {
            throw ClientError.integrity("the key bundle does not match the parameters the server gave")
        }
        let identity: Identity
        do { identity = try response.keyBundle.open(wrappingKey: keys.wrappingKey) } catch { throw ClientError.from(error) }
        do {
            try response.certificate.verify(adminKey: configuration.adminKey, userID: response.userID, username: username, role: response.role)
        } catch { throw ClientError.integrity("the account certificate does not verify under the pinned admin key: \(error)") }
        try Self.check(identity, matches: response.certificate)
        return identity
    }

    /// Derives under `kdf` and `salt` and proves the login key. The password goes in as NFC; an account
    /// registered with a non-NFC password before passwords were normalised gets a second try with the
    /// raw bytes when the server refuses the NFC form (Docs/envelope-v1.md §2).
    func proveLogin(
        username: String,
        password: String,
        kdf: KDFParameters,
        salt: Salt,
        deviceName: String? = nil
    ) async throws -> (PasswordKeys, LoginResponse) {
        let forms = PasswordKeys.forms(of: password)
        for (index, form) in forms.enumerated() {
            let keys: PasswordKeys
            do { keys = try await PasswordKeys.derive(password: password, salt: salt, parameters: kdf, form: form) } catch {
                throw ClientError.from(error)
            }
            let request = LoginRequest(username: username, loginKey: Base64URL.encode(keys.loginKey.copyBytes()), deviceName: deviceName)
            do {
                return (keys, try await transport.send(AccountEndpoints.login, request))
            } catch ClientError.notPermitted(code: .invalidCredentials?, _) where index + 1 < forms.count {
                continue
            }
        }
        throw ClientError.notPermitted(code: .invalidCredentials, "wrong password")
    }

    /// The current account's folder, or a clear error when nobody is logged in on this server.
    public func currentStore() throws -> ProfileStore {
        guard let store = try configuration.home.current(server: configuration.server), try store.loadProfile() != nil else {
            throw ClientError.localState("not logged in to \(configuration.server); run 'register' or 'login' first")
        }
        return store
    }

    /// Unlocks the current account with the remembered device key, else with `password`.
    public func unlockRemembered(orPassword password: String?) async throws -> UnlockedAccount {
        if let account = try unlockRemembered() { return account }
        return try await unlock(password: password)
    }

    /// Unlocks the current account with the remembered device key, or with the password.
    public func unlock(password: String?) async throws -> UnlockedAccount {
        if let account = try unlockRemembered() { return account }
        let (store, profile, certificate) = try approvedProfile()
        guard let password else {
            throw ClientError.notPermitted(code: nil, "a password is needed to unlock the keys (or log in with --remember)")
        }
        let (identity, wrappingKey) = try await Self.openBundle(profile.keyBundle, password: password)
        let account = try unlocked(store: store, profile: profile, certificate: certificate, identity: identity)
        try Keyring.migrate(at: store.keyringURL, from: wrappingKey, to: account.localStorageKey, ownerID: profile.userID)
        return account
    }

    /// Unlocks the current account with the remembered device key and the identity copy it opens, or
    /// returns nil when this device remembers nothing usable. A copy that does not open is an integrity
    /// failure. A key without a copy is either a wrapping key remembered before Docs/envelope-v1.md §2.2
    /// (replaced now by a random device key, so no password equivalent stays on disk) or left over from an
    /// interrupted `login --remember` (erased). Of the copy in use and one an interrupted `account move`
    /// staged beside it, the one sealed for the address `profile.json` names opens; a staged copy that does
    /// then replaces the other (Docs/envelope-v1.md §2.2).
    public func unlockRemembered() throws -> UnlockedAccount? {
        let (store, profile, certificate) = try approvedProfile()
        guard let deviceKey = try store.loadDeviceKey() else { return nil }
        if let copy = try store.loadRememberedIdentity() {
            let identity: Identity
            do { identity = try copy.open(deviceKey: deviceKey, userID: profile.userID, server: profile.server) } catch {
                guard let staged = try? store.loadStagedIdentity(),
                    let opened = try? staged.open(deviceKey: deviceKey, userID: profile.userID, server: profile.server)
                else { throw ClientError.integrity("\(error.description); log in again") }
                try store.promoteStagedIdentity()
                identity = opened
            }
            return try unlocked(store: store, profile: profile, certificate: certificate, identity: identity)
        }
        guard let identity = try? profile.keyBundle.open(wrappingKey: deviceKey) else {
            store.forgetDevice()
            return nil
        }
        let account = try unlocked(store: store, profile: profile, certificate: certificate, identity: identity)
        try Keyring.migrate(at: store.keyringURL, from: deviceKey, to: account.localStorageKey, ownerID: profile.userID)
        try store.remember(identity, server: profile.server)
        return account
    }

    /// The current profile, once the admin has approved it (before that there is no certificate).
    func approvedProfile() throws -> (ProfileStore, Profile, Certificate) {
        let store = try currentStore()
        guard let profile = try store.loadProfile() else { throw ClientError.localState("not logged in") }
        guard let certificate = profile.certificate else {
            throw ClientError.notPermitted(
                code: .pendingApproval,
                "account '\(profile.username)' is waiting for admin approval; run 'login' once it is approved"
            )
        }
        return (store, profile, certificate)
    }

    /// Checks the stored certificate and that it names the keys just unlocked, then assembles the account.
    func unlocked(store: ProfileStore, profile: Profile, certificate: Certificate, identity: Identity) throws -> UnlockedAccount {
        do { try certificate.verify(adminKey: configuration.adminKey, userID: profile.userID, role: profile.role) } catch {
            throw ClientError.integrity("stored certificate does not verify under the pinned admin key")
        }
        try Self.check(identity, matches: certificate)
        return UnlockedAccount(profile: profile, identity: identity, certificate: certificate, store: store, session: try store.loadSession())
    }

    static func check(_ identity: Identity, matches certificate: Certificate) throws {
        guard certificate.signingKey == identity.signing.publicKey, certificate.boxKey == identity.box.publicKey else {
            throw ClientError.integrity("the certificate names other keys than the key bundle holds")
        }
    }

    /// Opens a key bundle with a password: NFC first, then the raw bytes when they differ (accounts
    /// registered before passwords were normalised). Returns the identity and the wrapping key.
    static func openBundle(_ bundle: KeyBundle, password: String) async throws -> (Identity, SymmetricKey) {
        let forms = PasswordKeys.forms(of: password)
        for (index, form) in forms.enumerated() {
            let keys: PasswordKeys
            do { keys = try await PasswordKeys.derive(password: password, salt: bundle.salt, parameters: bundle.kdf, form: form) } catch {
                throw ClientError.from(error)
            }
            do { return (try bundle.open(wrappingKey: keys.wrappingKey), keys.wrappingKey) } catch .wrongPassword where index + 1 < forms.count {
                continue
            } catch { throw ClientError.from(error) }
        }
        throw ClientError.from(TrustError.wrongPassword)
    }

    /// Ends the session on the server (best effort) and erases the session and remembered key here.
    public func logout() async throws {
        let store = try currentStore()
        if let session = try store.loadSession() {
            _ = try? await transport.send(AccountEndpoints.logout, auth: .session(session.token))
        }
        store.forgetSecrets()
    }

    static func newDeviceID() -> String { "dev-" + Hex.encode(RandomBytes.bytes(count: 8)) }
}
