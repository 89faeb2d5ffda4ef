import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// What moving a profile to a new address of the same deployment did (`AccountManager.moveProfile`).
public struct ProfileMove: Sendable {
    /// How the new address was asked for the account, once the checks that send no credential passed.
    public enum Check: String, Sendable {
        /// With this device's session: it accepted it and served the account's certificate.
        case session
        /// It did not accept the session (or there was none): a login there, checked as every login is.
        case login
    }

    /// What the deployment ids showed.
    public enum Deployment: String, Sendable {
        /// The new address gave the deployment id the old one gave.
        case same
        /// The old address did not answer: only the password-hashing parameters and salt were compared.
        case unchecked
    }

    /// The account's username.
    public let username: String
    /// The address the profile was kept under.
    public let from: String
    /// The address it is kept under now.
    public let to: String
    /// The profile's folder now.
    public let folder: URL
    /// How the new address was asked for the account.
    public let check: Check
    /// Whether the deployment ids were compared.
    public let deployment: Deployment
    /// Whether the device had a remembered key, which now opens a copy sealed for the new address.
    public let remembered: Bool
}

extension AccountManager {
    /// Moves this device's profile of the current account on `configuration.server` to `newServer`, another
    /// address of the same deployment: a load balancer's name, a new host name.
    ///
    /// First come the checks that send no credential (only the username): `target` (a transport to
    /// `newServer`) must give the deployment id the old address gives (when the old address answers), and
    /// for the username the password-hashing parameters and salt this device stored (or a newer password
    /// change signed by the account's key). These catch a mistyped address and another deployment. Then
    /// the session token goes to `newServer`, whose `GET /v1/accounts/me` must be the stored certificate;
    /// when it refuses the session, the login key of `password()` goes there and the login must pass every
    /// check of `login` and name the same user, role and certificate. None of this proves that `newServer`
    /// is not an impostor passing requests on to the real service: the deployment id, the parameters and
    /// the certificate are all public. Nothing on this device changes before these checks pass. A profile
    /// of the user already kept under `newServer` is never merged or overwritten. Then the whole folder
    /// (store, cursors, accepted commitments, pins, audit marks) moves with one rename (`move`).
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
        let there = AccountManager(
            configuration: ClientConfiguration(server: newServer, home: home, adminKey: configuration.adminKey, kdf: configuration.kdf),
            transport: target
        )
        // Without credentials: the deployment id, then the parameters and salt.
        let deployment: ProfileMove.Deployment = try await sameDeployment(as: there) ? .same : .unchecked
        let offered = try await there.storedParameters(of: profile)
        // With credentials: the session, else a login.
        var moved = profile
        moved.server = newServer
        var opened: StoredSession?
        let check: ProfileMove.Check
        if let s = try store.loadSession(), s.expiresAt > Date().unixMillis,
            try await there.serves(profile, certificate: certificate, session: s.token)
        {
            check = .session
        } else {
            let login = try await there.logsIn(profile, certificate: certificate, password: try password(), offered: offered, deviceName: deviceName)
            moved.keyBundle = login.keyBundle
            moved.credentialParameters = login.credentialParameters
            opened = login.session
            check = .login
        }
        do {
            // The first change on this device: a remembered key of the layout before Docs/envelope-v1.md §2.2 is
            // upgraded, as any command's unlock does, so that its copy can be sealed for the new address.
            let remembered = try unlockRemembered()?.identity
            try Self.move(store, to: destination, profile: moved, session: opened, remembered: remembered, home: home, from: old)
            return ProfileMove(
                username: profile.username,
                from: old,
                to: newServer,
                folder: destination.folder,
                check: check,
                deployment: deployment,
                remembered: remembered != nil
            )
        } catch let crash as MoveCrashed {
            throw crash
        } catch {
            // The session this move opened at the new address is of no use now.
            if let opened { _ = try? await target.send(AccountEndpoints.logout, auth: .session(opened.token)) }
            throw error
        }
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

    /// Whether `there` gives the deployment id this (the old) address gives; false when this address does
    /// not answer with one (it is gone already), so that only the parameters are compared. Sends nothing
    /// but the two requests.
    func sameDeployment(as there: AccountManager) async throws -> Bool {
        let new = there.configuration.server
        let theirs: String
        do { theirs = try await there.transport.send(AdminEndpoints.deployment).deploymentID } catch ClientError.notFound {
            throw ClientError.notFound(
                "\(new) does not answer GET \(Routes.deployment): it is not a CareVault server of this release, or a proxy that does "
                    + "not pass that route on; nothing was sent and nothing was moved"
            )
        }
        let ours: String
        do { ours = try await transport.send(AdminEndpoints.deployment).deploymentID } catch is ClientError { return false }
        guard ours == theirs else {
            throw ClientError.integrity(
                "\(new) is another deployment than \(configuration.server) (deployment id \(ClientError.printable(theirs, limit: 40)), "
                    + "not \(ClientError.printable(ours, limit: 40))): a mistyped address, or another service; nothing was sent and "
                    + "nothing was moved"
            )
        }
        return true
    }

    /// The parameters and salt this server offers for `profile`'s username, which must be the ones this
    /// device stored (or a newer change signed by the account's key, `OfferedParameters.check`). Sends
    /// only the username.
    func storedParameters(of profile: Profile) async throws -> (offered: OfferedParameters, kdf: KDFParameters, salt: Salt) {
        let username = profile.username
        let offered = try await transport.send(
            AccountEndpoints.loginParameters.answer(as: OfferedParameters.self),
            LoginParametersRequest(username: username)
        )
        do {
            let (kdf, salt) = try offered.check(against: profile, username: username, folder: "")
            return (offered, kdf, salt)
        } catch ClientError.integrity {
            throw ClientError.integrity(
                "\(configuration.server) offers other password-hashing parameters or salt for '\(username)' than this device holds: "
                    + "another deployment, or it forges its answers; no session or password was sent and nothing was moved"
            )
        }
    }

    /// Whether this server accepts `token` as a session of `profile`'s account: false when it refuses the
    /// session (401), true when it then serves the account's certificate, an integrity failure when it
    /// serves any other.
    func serves(_ profile: Profile, certificate: Certificate, session token: String) async throws -> Bool {
        let entry: DirectoryEntry
        do { entry = try await transport.send(AccountEndpoints.me, auth: .session(token)) } catch ClientError.notPermitted(code: .unauthorized?, _) {
            return false
        } catch ClientError.notPermitted(code: .none, _) {
            return false
        } catch ClientError.notFound {
            throw ClientError.notFound(
                "\(configuration.server) does not answer GET \(Routes.me): it is a CareVault server older than this tool, or a proxy "
                    + "that does not pass that route on; nothing was moved"
            )
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

    /// Logs in to this server as `profile`'s account without storing anything, deriving under the parameters
    /// and salt `storedParameters` accepted; the answer passes every check of `login` and names the
    /// profile's user, role and certificate. A session the server opened for an answer refused here is ended.
    func logsIn(
        _ profile: Profile,
        certificate: Certificate,
        password: String,
        offered: (offered: OfferedParameters, kdf: KDFParameters, salt: Salt),
        deviceName: String?
    ) async throws -> MovedLogin {
        let username = profile.username
        let (kdf, salt) = (offered.kdf, offered.salt)
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
        let parameters = offered.offered.newestChange(
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
