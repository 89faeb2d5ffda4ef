import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// What moving a profile to a new address of the same deployment did (`AccountManager.moveProfile`).
public struct ProfileMove: Sendable {
    /// How the new address showed that it serves the same account.
    public enum Check: String, Sendable {
        /// It accepted this device's session and served the account's own certificate.
        case session
        /// It did not accept the session (or there was none): a login there, checked as every login is.
        case login
    }

    /// The account's username.
    public let username: String
    /// The address the profile was kept under.
    public let from: String
    /// The address it is kept under now.
    public let to: String
    /// The profile's folder now.
    public let folder: URL
    /// How the new address was checked.
    public let check: Check
    /// Whether the device had a remembered key, which now opens a copy sealed for the new address.
    public let remembered: Bool
}

extension AccountManager {
    /// Moves this device's profile of the current account on `configuration.server` to `newServer`, another
    /// address of the same deployment: a load balancer's name, a new host name. Nothing here changes until
    /// `target` (a transport to `newServer`) has shown that it serves the very account this device holds:
    /// with the stored session, its `GET /v1/accounts/me` must be the stored certificate, verified under the
    /// pinned admin key for the profile's user id, username and role; when it does not accept the session,
    /// a login there with `password()` must pass every check of `login`, against the parameters and salt
    /// this device stored, and answer with that user, role and certificate. A profile of the user already
    /// kept under `newServer` is never merged or overwritten. Then the whole folder (store, cursors,
    /// accepted commitments, pins, audit marks) moves with one `rename`, so everything this device accepted
    /// is enforced at the new address as it was at the old one.
    public func moveProfile(
        to newServer: String,
        through target: Transport,
        password: () throws -> String,
        deviceName: String? = nil
    ) async throws -> ProfileMove {
        let old = configuration.server
        let home = configuration.home
        // The address checked is the address moved to.
        guard target.baseURL == newServer || target.baseURL + "/" == newServer else {
            throw ClientError.invalidRequest("the transport goes to \(target.baseURL), not to \(newServer)")
        }
        guard let store = try home.current(server: old), let profile = try store.loadProfile() else {
            throw ClientError.invalidRequest("this device has no profile for \(old): --server names the address you logged in at")
        }
        guard let certificate = profile.certificate else {
            throw ClientError.notPermitted(
                code: .pendingApproval,
                "account '\(profile.username)' is waiting for admin approval; log in at \(newServer) once it is approved"
            )
        }
        let destination = home.store(server: newServer, username: profile.username)
        guard destination.folder.standardizedFileURL.path != store.folder.standardizedFileURL.path else {
            throw ClientError.invalidRequest("\(newServer) names the folder this profile is already kept in; nothing to move")
        }
        try Self.requireNoProfile(at: destination, username: profile.username, server: newServer)
        // The keys a remembered device key opens, to seal them again for the new address.
        let remembered = try unlockRemembered()?.identity
        let there = AccountManager(
            configuration: ClientConfiguration(server: newServer, home: home, adminKey: configuration.adminKey, kdf: configuration.kdf),
            transport: target
        )
        var moved = profile
        moved.server = newServer
        var session = try store.loadSession()
        let check: ProfileMove.Check
        if let s = session, s.expiresAt > Date().unixMillis, try await there.serves(profile, certificate: certificate, session: s.token) {
            check = .session
        } else {
            let login = try await there.logsIn(profile, certificate: certificate, password: try password(), deviceName: deviceName)
            moved.keyBundle = login.keyBundle
            moved.credentialParameters = login.credentialParameters
            session = login.session
            check = .login
        }
        try Self.requireNoProfile(at: destination, username: profile.username, server: newServer)
        try Self.move(store, to: destination, profile: moved, session: session, remembered: remembered, home: home, from: old)
        return ProfileMove(
            username: profile.username,
            from: old,
            to: newServer,
            folder: destination.folder,
            check: check,
            remembered: remembered != nil
        )
    }

    /// Refuses a destination folder that exists: a profile there (or anything else) is never merged or replaced.
    static func requireNoProfile(at destination: ProfileStore, username: String, server: String) throws {
        guard !FileManager.default.fileExists(atPath: destination.folder.path) else { throw alreadyThere(destination, username, server) }
    }

    static func alreadyThere(_ destination: ProfileStore, _ username: String, _ server: String) -> ClientError {
        .invalidRequest(
            "this device already has a profile of '\(username)' for \(server) (\(destination.folder.path)); nothing was moved: "
                + "use that one, or log out there and remove its folder before moving this one"
        )
    }

    /// Whether this server accepts `token` as a session of `profile`'s account: false when it refuses the
    /// session (401), the account's certificate when it accepts it, or an integrity failure when it serves
    /// any other certificate.
    func serves(_ profile: Profile, certificate: Certificate, session token: String) async throws -> Bool {
        let entry: DirectoryEntry
        do { entry = try await transport.send(AccountEndpoints.me, auth: .session(token)) } catch ClientError.notPermitted(code: .unauthorized?, _) {
            return false
        } catch ClientError.notPermitted(code: .none, _) {
            return false
        }
        try requireSameAccount(entry.certificate, as: profile, certificate: certificate)
        return true
    }

    /// The certificate a server serves must verify under the pinned admin key for the profile's user id,
    /// username and role (as at login), and be the one this device stored: the same keys, the same issue.
    func requireSameAccount(_ served: Certificate, as profile: Profile, certificate: Certificate) throws {
        let server = configuration.server
        do { try served.verify(adminKey: configuration.adminKey, userID: profile.userID, username: profile.username, role: profile.role) } catch {
            throw ClientError.integrity(
                "\(server) does not serve the account '\(profile.username)' this device holds (\(error)): another deployment, or a forged "
                    + "answer; nothing was moved"
            )
        }
        guard served == certificate else {
            throw ClientError.integrity(
                "\(server) serves another certificate of '\(profile.username)' (fingerprint \(served.fingerprint)) than this device holds "
                    + "(\(certificate.fingerprint)); nothing was moved"
            )
        }
    }

    /// What a login at this server brings to a moved profile.
    struct MovedLogin {
        var keyBundle: KeyBundle
        var credentialParameters: CredentialParameters?
        var session: StoredSession
    }

    /// Logs in to this server as `profile`'s account without storing anything: the parameters and salt
    /// offered must be the stored ones (or a newer signed change of them), checked before deriving or
    /// sending anything; the answer passes every check of `login` and names the profile's user, role and
    /// certificate. A session the server opened for an answer refused here is ended.
    func logsIn(_ profile: Profile, certificate: Certificate, password: String, deviceName: String?) async throws -> MovedLogin {
        let username = profile.username
        let offered = try await transport.send(
            AccountEndpoints.loginParameters.answer(as: OfferedParameters.self),
            LoginParametersRequest(username: username)
        )
        let parametersAndSalt: (KDFParameters, Salt)
        do { parametersAndSalt = try offered.check(against: profile, username: username, folder: "") } catch ClientError.integrity {
            throw ClientError.integrity(
                "\(configuration.server) offers other password-hashing parameters or salt for '\(username)' than this device holds: it is "
                    + "not the deployment of this profile, or it forges its answers; nothing was sent and nothing was moved"
            )
        }
        let (kdf, salt) = parametersAndSalt
        let (keys, response) = try await proveLogin(username: username, password: password, kdf: kdf, salt: salt, deviceName: deviceName)
        do {
            guard response.userID == profile.userID, response.role == profile.role else {
                throw ClientError.integrity("\(configuration.server) logged in another account as '\(username)'; nothing was moved")
            }
            _ = try checked(response, keys: keys, kdf: kdf, salt: salt, username: username)
            try requireSameAccount(response.certificate, as: profile, certificate: certificate)
        } catch {
            _ = try? await transport.send(AccountEndpoints.logout, auth: .session(response.token))
            throw error
        }
        let parameters = offered.newestChange(
            stored: profile.credentialParameters,
            kdf: kdf,
            salt: salt,
            userID: profile.userID,
            certificate: certificate
        )
        return MovedLogin(
            keyBundle: response.keyBundle,
            credentialParameters: parameters,
            session: StoredSession(token: response.token, expiresAt: response.expiresAt)
        )
    }
}
