import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// What a device remembers about one account on one server (Docs/design.md §7): one folder per server and
/// user under the home, holding the profile, the session, the optional remembered device key and the
/// identity copy it opens, the encrypted keyring and the local store. Nothing in it is plaintext health
/// data, an unwrapped key or a key derived from the password.
public struct Profile: Codable, Sendable, Equatable {
    /// The server's base URL.
    public var server: String
    /// The account's username.
    public var username: String
    /// The account's user id.
    public var userID: UUID
    /// The account's role.
    public var role: Role
    /// This device's id: the HLC device component of everything it writes.
    public var deviceID: String
    /// The account's certificate, verified against the pinned admin key when it was stored. Nil while pending.
    public var certificate: Certificate?
    /// The wrapped key bundle (the same the server keeps), so the device can unlock without the server.
    public var keyBundle: KeyBundle
    /// The newest signed password change this device accepted (made here, or offered at a login): an
    /// older one offered later is a replay and refused (Docs/envelope-v1.md §2.4). Nil until the first.
    public var credentialParameters: CredentialParameters?

    /// The folder of `username` on `server` under `home`.
    public static func folder(home: URL, server: String, username: String) -> URL {
        let serverKey = server.replacingOccurrences(of: "://", with: "_").map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" ? $0 : "_" }
        return home.appendingPathComponent("profiles").appendingPathComponent(String(serverKey)).appendingPathComponent(username)
    }
}

/// A bearer session.
public struct StoredSession: Codable, Sendable {
    /// The bearer token.
    public var token: String
    /// When the session ends.
    public var expiresAt: UnixMillis
}

/// The files of one profile folder.
public struct ProfileStore: Sendable {
    /// The profile folder.
    public let folder: URL
    /// The profile (no secrets).
    public var profileURL: URL { folder.appendingPathComponent("profile.json") }
    /// The session token.
    public var sessionURL: URL { folder.appendingPathComponent("session.json") }
    /// The remembered random device key, when the user opted in (Docs/envelope-v1.md §2.2).
    public var deviceKeyURL: URL { folder.appendingPathComponent("device.key") }
    /// The account's private keys sealed under the remembered device key.
    public var rememberedIdentityURL: URL { folder.appendingPathComponent("device-identity.json") }
    /// A second identity copy under the same device key, sealed for the address `account move` moves the
    /// profile to; it replaces `device-identity.json` once the folder has moved (Docs/envelope-v1.md §2.2).
    public var stagedIdentityURL: URL { folder.appendingPathComponent("device-identity.next.json") }
    /// The encrypted keyring.
    public var keyringURL: URL { folder.appendingPathComponent("keyring.json") }
    /// The local store (a patient's records, or a doctor's cache).
    public var storeURL: URL { folder.appendingPathComponent("store.sqlite") }

    /// The files of the profile in `folder`.
    public init(folder: URL) { self.folder = folder }

    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .prettyPrinted]
        return e
    }()

    /// The stored profile, or nil when there is none.
    public func loadProfile() throws -> Profile? {
        guard let data = try SecureFiles.read(profileURL) else { return nil }
        do { return try JSONDecoder().decode(Profile.self, from: data) } catch {
            throw ClientError.localState("profile at \(profileURL.path) is unreadable; log in again")
        }
    }

    /// Stores the profile (mode 0600, atomically).
    public func save(_ profile: Profile) throws { try SecureFiles.write(try Self.encoder.encode(profile), to: profileURL) }

    /// The stored session, or nil when there is none (or it is unreadable).
    public func loadSession() throws -> StoredSession? {
        guard let data = try SecureFiles.read(sessionURL) else { return nil }
        return try? JSONDecoder().decode(StoredSession.self, from: data)
    }

    /// Stores the session (mode 0600, atomically).
    public func save(_ session: StoredSession) throws { try SecureFiles.write(try Self.encoder.encode(session), to: sessionURL) }

    /// The remembered device key, if the user opted in. Before Docs/envelope-v1.md §2.2 this file held the
    /// wrapping key itself; a file without an identity copy beside it is such a key (or a half-written one).
    public func loadDeviceKey() throws -> SymmetricKey? {
        guard let data = try SecureFiles.read(deviceKeyURL) else { return nil }
        guard let text = String(data: data, encoding: .utf8), let bytes = try? Base64URL.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)),
            let key = try? SymmetricKey(bytes: bytes)
        else { throw ClientError.localState("remembered device key is corrupt; log in again") }
        return key
    }

    /// The identity copy sealed under the device key, or nil when there is none; unreadable JSON is an
    /// integrity failure, like a copy whose ciphertext was altered.
    public func loadRememberedIdentity() throws -> RememberedIdentity? {
        guard let data = try SecureFiles.read(rememberedIdentityURL) else { return nil }
        do { return try JSONDecoder().decode(RememberedIdentity.self, from: data) } catch {
            throw ClientError.integrity("the remembered key copy at \(rememberedIdentityURL.path) is damaged; log in again")
        }
    }

    /// The copy staged by an `account move` cut off before it finished, or nil when there is none.
    public func loadStagedIdentity() throws -> RememberedIdentity? {
        guard let data = try SecureFiles.read(stagedIdentityURL) else { return nil }
        do { return try JSONDecoder().decode(RememberedIdentity.self, from: data) } catch {
            throw ClientError.integrity("the remembered key copy at \(stagedIdentityURL.path) is damaged; log in again")
        }
    }

    /// Seals `identity` under the device key this folder already holds for `server`, beside the copy in use
    /// (which stays as it is and still opens for the address it was sealed for).
    public func stage(_ identity: Identity, server: String) throws {
        guard let key = try loadDeviceKey() else { throw ClientError.localState("no remembered device key in \(folder.path)") }
        let copy = RememberedIdentity.seal(identity, deviceKey: key, server: server)
        try SecureFiles.write(try Self.encoder.encode(copy), to: stagedIdentityURL)
    }

    /// Makes the staged copy the copy in use, in one `rename` within the folder.
    public func promoteStagedIdentity() throws {
        guard rename(stagedIdentityURL.path, rememberedIdentityURL.path) == 0 else {
            throw ClientError.localState("cannot write \(rememberedIdentityURL.path): \(String(cString: strerror(errno)))")
        }
    }

    /// Keeps the copy in use when it opens for `server`, else seals `identity` for `server` again under the
    /// same device key (staged, then in one rename).
    public func keepCopy(of identity: Identity, for server: String) throws {
        guard let key = try loadDeviceKey() else { return }
        if let copy = try? loadRememberedIdentity(), (try? copy.open(deviceKey: key, userID: identity.userID, server: server)) != nil { return }
        try stage(identity, server: server)
        try promoteStagedIdentity()
    }

    /// Remembers `identity` on this device: a fresh random device key (mode 0600) and the identity sealed
    /// under it for `server`. The old copy goes first, so a crash part-way leaves a key without a copy,
    /// which unlocking treats as nothing remembered, never a key paired with the wrong copy.
    public func remember(_ identity: Identity, server: String) throws {
        SecureFiles.erase(rememberedIdentityURL)
        SecureFiles.erase(stagedIdentityURL)
        let key = SymmetricKey.generate()
        var bytes = key.copyBytes()
        defer { Memory.zero(&bytes) }
        try SecureFiles.write(Data(Base64URL.encode(bytes).utf8), to: deviceKeyURL)
        let copy = RememberedIdentity.seal(identity, deviceKey: key, server: server)
        try SecureFiles.write(try Self.encoder.encode(copy), to: rememberedIdentityURL)
    }

    /// Forgets the remembered device key and the identity copy it opens.
    public func forgetDevice() {
        SecureFiles.erase(rememberedIdentityURL)
        SecureFiles.erase(stagedIdentityURL)
        SecureFiles.erase(deviceKeyURL)
    }

    /// Logout: forget the session, the remembered key and its identity copy. The profile and the
    /// (encrypted) store stay.
    public func forgetSecrets() {
        SecureFiles.erase(sessionURL)
        forgetDevice()
    }
}

/// The home folder: profiles, and which one is current.
public struct Home: Sendable {
    /// The home folder.
    public let url: URL

    /// The home at `url`.
    public init(url: URL) { self.url = url }

    /// `--home`, else `CAREVAULT_HOME`, else `~/.carevault`.
    public static func resolve(_ explicit: String?) -> Home {
        if let explicit { return Home(url: URL(fileURLWithPath: explicit)) }
        if let env = ProcessInfo.processInfo.environment["CAREVAULT_HOME"], !env.isEmpty { return Home(url: URL(fileURLWithPath: env)) }
        return Home(url: FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".carevault"))
    }

    var currentURL: URL { url.appendingPathComponent("current.json") }

    struct Current: Codable {
        var server: String
        var username: String
    }

    /// The profile folder of the current account on `server`, if any.
    public func current(server: String) throws -> ProfileStore? {
        guard let data = try SecureFiles.read(currentURL), let c = try? JSONDecoder().decode([String: String].self, from: data),
            let username = c[server]
        else { return nil }
        return ProfileStore(folder: Profile.folder(home: url, server: server, username: username))
    }

    /// Makes `username` the current account on `server`.
    public func setCurrent(server: String, username: String) throws {
        var map = (try? SecureFiles.read(currentURL)).flatMap { $0 }.flatMap { try? JSONDecoder().decode([String: String].self, from: $0) } ?? [:]
        map[server] = username
        try SecureFiles.write(try JSONEncoder().encode(map), to: currentURL)
    }

    /// The username the current-account map names for `server`, if any.
    public func currentEntry(server: String) -> String? {
        (try? SecureFiles.read(currentURL)).flatMap { $0 }.flatMap { try? JSONDecoder().decode([String: String].self, from: $0) }?[server]
    }

    /// Puts the entry of `server` in the current-account map back to `username`, or removes it when nil.
    public func restoreCurrent(server: String, to username: String?) throws {
        var map = (try? SecureFiles.read(currentURL)).flatMap { $0 }.flatMap { try? JSONDecoder().decode([String: String].self, from: $0) } ?? [:]
        guard map[server] != username else { return }
        map[server] = username
        try SecureFiles.write(try JSONEncoder().encode(map), to: currentURL)
    }

    /// Removes the entry of `server` from the current-account map when it names `username` (an entry
    /// naming someone else is left as it is).
    public func removeCurrent(server: String, username: String) throws {
        guard let data = try SecureFiles.read(currentURL), var map = try? JSONDecoder().decode([String: String].self, from: data),
            map[server] == username
        else { return }
        map[server] = nil
        try SecureFiles.write(try JSONEncoder().encode(map), to: currentURL)
    }

    /// The profile folder of `username` on `server`.
    public func store(server: String, username: String) -> ProfileStore {
        ProfileStore(folder: Profile.folder(home: url, server: server, username: username))
    }
}
