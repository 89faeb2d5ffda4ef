import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// An account's recovery key: 32 random bytes shown once at registration, which open the account's
/// recovery bundle independently of the password (Docs/envelope-v1.md §2.3).
public struct RecoveryKey: Sendable, Equatable {
    /// The 32 bytes.
    let key: SymmetricKey

    static let loginContext = try! KDFContext("CVrlogin")
    static let wrappingContext = try! KDFContext("CVrwrap_")
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    /// A new random recovery key.
    public static func generate() -> RecoveryKey { RecoveryKey(key: .generate()) }

    /// Reads the text form: base32 (RFC 4648, no padding), any case, spaces and dashes ignored.
    public init(text: String) throws {
        let symbols = text.uppercased().utf8.filter { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "-") }
        var bits: UInt64 = 0
        var count = 0
        var bytes: [UInt8] = []
        defer { Memory.zero(&bytes) }
        for s in symbols {
            guard let v = Self.alphabet.firstIndex(of: s) else {
                throw ClientError.invalidRequest("the recovery key holds a character that is not in its alphabet (A-Z, 2-7)")
            }
            bits = bits << 5 | UInt64(v)
            count += 5
            if count >= 8 {
                count -= 8
                bytes.append(UInt8(truncatingIfNeeded: bits >> UInt64(count)))
            }
        }
        guard bytes.count == 32, symbols.count == 52 else {
            throw ClientError.invalidRequest("a recovery key has 52 letters and digits (13 groups of 4); this one has \(symbols.count)")
        }
        key = try SymmetricKey(bytes: bytes)
    }

    init(key: SymmetricKey) { self.key = key }

    /// The text form: 52 base32 symbols in 13 groups of 4, joined by dashes.
    public var text: String {
        var bytes = key.copyBytes()
        defer { Memory.zero(&bytes) }
        var out: [UInt8] = []
        var bits: UInt64 = 0
        var count = 0
        for b in bytes {
            bits = bits << 8 | UInt64(b)
            count += 8
            while count >= 5 {
                count -= 5
                out.append(Self.alphabet[Int(bits >> UInt64(count) & 31)])
            }
        }
        if count > 0 { out.append(Self.alphabet[Int(bits << UInt64(5 - count) & 31)]) }
        return stride(from: 0, to: out.count, by: 4).map { String(decoding: out[$0..<min($0 + 4, out.count)], as: UTF8.self) }
            .joined(separator: "-")
    }

    /// Proves the recovery key to the server, which keeps only its verifier.
    var loginKey: SymmetricKey { key.deriveSubkey(id: 1, context: Self.loginContext) }
    /// Wraps the recovery bundle; never leaves the client.
    var wrappingKey: SymmetricKey { key.deriveSubkey(id: 1, context: Self.wrappingContext) }

    /// The verifier the server stores: `H(string "CareVault-recovery-verifier-v1" || bytes recovery login key)`.
    var verifier: String {
        var w = CanonicalWriter(domain: "CareVault-recovery-verifier-v1")
        w.append(loginKey.copyBytes())
        defer { w.wipe() }
        return Base64URL.encode(try! BLAKE2b.hash(w.bytes))
    }

    /// The proof of this key for `username`.
    func proof(username: String) -> RecoveryProof {
        RecoveryProof(username: username, recoveryLoginKey: Base64URL.encode(loginKey.copyBytes()))
    }
}

extension RecoveryBundle {
    static let domain = "CareVault-recovery-bundle-v1"
    static let keysDomain = "CareVault-recovery-bundle-keys-v1"

    static func associatedData(version: UInt8, userID: UUID) -> [UInt8] {
        var w = CanonicalWriter(domain: domain)
        w.append(version)
        w.append(userID)
        return w.bytes
    }

    /// Seals `identity`'s private keys under the recovery key's wrapping key.
    static func seal(_ identity: Identity, recoveryKey: RecoveryKey) -> RecoveryBundle {
        let nonce = AEADNonce.random()
        var plain = Self.privateKeys(identity)
        defer { Memory.zero(&plain) }
        let ad = associatedData(version: 1, userID: identity.userID)
        let sealed = AEAD.seal(plain, key: recoveryKey.wrappingKey, nonce: nonce, associatedData: ad)
        return RecoveryBundle(userID: identity.userID, nonce: nonce, ciphertext: Base64URL.encode(sealed))
    }

    /// `string keysDomain || bytes signing seed || bytes box secret || bytes record-id key`, as in a key bundle.
    static func privateKeys(_ identity: Identity) -> [UInt8] {
        var w = CanonicalWriter(domain: keysDomain)
        var parts = [identity.signing.seed.copyBytes(), identity.box.secretKey.copyBytes(), identity.recordIDKey.copyBytes()]
        for p in parts { w.append(p) }
        for i in parts.indices { Memory.zero(&parts[i]) }
        return w.bytes
    }

    /// Opens the bundle of `userID`. A wrong recovery key or an altered bundle is an integrity failure:
    /// the server already accepted the key's proof, so a bundle that does not open was changed.
    func open(recoveryKey: RecoveryKey, userID expected: UUID) throws -> Identity {
        guard version == 1, userID == expected, let sealed = try? Base64URL.decode(ciphertext) else {
            throw ClientError.integrity("the server's recovery bundle is not one of this account's")
        }
        var plain: [UInt8]
        do {
            plain = try AEAD.open(
                sealed,
                key: recoveryKey.wrappingKey,
                nonce: nonce,
                associatedData: Self.associatedData(version: version, userID: userID)
            )
        } catch { throw ClientError.integrity("the recovery bundle does not open under this recovery key (altered or not this account's)") }
        defer { Memory.zero(&plain) }
        do {
            var r = try CanonicalReader(plain, domain: Self.keysDomain)
            var seed = try r.readBytes()
            var box = try r.readBytes()
            var rid = try r.readBytes()
            defer {
                Memory.zero(&seed)
                Memory.zero(&box)
                Memory.zero(&rid)
            }
            try r.finish()
            return Identity(
                userID: userID,
                signing: try SigningKeyPair(seed: SecureBytes(copying: seed)),
                box: try BoxKeyPair(secretKey: SecureBytes(copying: box)),
                recordIDKey: try SymmetricKey(bytes: rid)
            )
        } catch { throw ClientError.integrity("the recovery bundle's keys are malformed") }
    }
}

extension CredentialUpdate {
    /// New password credentials for `identity`: a fresh salt, `kdf`, the key bundle re-wrapped, signed
    /// by the account's signing key (Docs/envelope-v1.md §2.4). `changedAt` is now, or just after `after`
    /// (the newest change this device knows) when the clock is behind it: the server requires it to increase.
    /// The first instant after `after` (the newest change this device accepted), checked: a change dated at
    /// the end of time is one no later change can follow.
    static func after(_ after: UnixMillis?) throws -> UnixMillis {
        guard let after else { return .min }
        let (next, overflow) = after.addingReportingOverflow(1)
        guard !overflow else {
            throw ClientError.integrity("the account's newest credential change is dated at the end of time; no later change can follow it")
        }
        return next
    }

    static func make(identity: Identity, password: String, kdf: KDFParameters, after: UnixMillis? = nil) async throws -> CredentialUpdate {
        guard password.count >= 8 else { throw ClientError.invalidRequest("the new password must have at least 8 characters") }
        let salt = Salt.random()
        let keys: PasswordKeys
        do { keys = try await PasswordKeys.derive(password: password, salt: salt, parameters: kdf) } catch { throw ClientError.from(error) }
        let bundle = KeyBundle.seal(identity, wrappingKey: keys.wrappingKey, kdf: kdf, salt: salt)
        var update = CredentialUpdate(
            userID: identity.userID,
            kdf: kdf,
            salt: salt,
            loginVerifier: Base64URL.encode(keys.loginVerifier),
            keyBundle: bundle,
            changedAt: max(Date().unixMillis, try Self.after(after)),
            signature: identity.signing.sign([])
        )
        update.signature = identity.signing.sign(update.statementBytes)
        let placeholder = identity.signing.sign([])
        var parameters = CredentialParameters(userID: identity.userID, kdf: kdf, salt: salt, changedAt: update.changedAt, signature: placeholder)
        parameters.signature = identity.signing.sign(parameters.statementBytes)
        update.parameters = parameters
        return update
    }
}

/// What proves, besides a session, that the account's owner asks (Docs/design.md §2).
public enum AccountProof: Sendable {
    /// The current password.
    case password(String)
    /// The recovery key.
    case recoveryKey(RecoveryKey)
}

/// What `register` made: the server's answer and the recovery key to show the user once.
public struct Registration: Sendable {
    /// The server's answer.
    public let response: RegisterResponse
    /// The recovery key; it is stored nowhere.
    public let recoveryKey: RecoveryKey
    /// The fingerprint of the account's keys, for the person to read out and the admin to compare before
    /// approving (`carevault-admin review` shows the same).
    public let fingerprint: String
}

extension AccountManager {
    /// Changes the password: proves the current one, re-wraps the key bundle under a fresh salt and the
    /// configured parameters, and replaces the login verifier; the server ends every other session. The
    /// change's signed parameters become the newest this device accepted.
    public func changePassword(_ account: UnlockedAccount, current: String, new: String) async throws {
        let auth = try account.sessionAuth
        let proven = try await Self.currentKeys(account, password: current)
        let update = try await CredentialUpdate.make(
            identity: account.identity,
            password: new,
            kdf: configuration.kdf,
            after: account.profile.credentialParameters?.changedAt
        )
        let request = PasswordChangeRequest(currentLoginKey: Base64URL.encode(proven.loginKey.copyBytes()), update: update)
        _ = try await transport.send(AccountEndpoints.passwordChange, request, auth: auth)
        var profile = account.profile
        profile.keyBundle = update.keyBundle
        profile.credentialParameters = update.parameters
        try account.store.save(profile)
    }

    /// The password keys of `password` under the parameters and salt of the key bundle this device holds,
    /// once they open it: a wrong password is refused here, before anything is sent.
    static func currentKeys(_ account: UnlockedAccount, password: String) async throws -> PasswordKeys {
        let bundle = account.profile.keyBundle
        for form in PasswordKeys.forms(of: password) {
            let keys: PasswordKeys
            do { keys = try await PasswordKeys.derive(password: password, salt: bundle.salt, parameters: bundle.kdf, form: form) } catch {
                throw ClientError.from(error)
            }
            if (try? bundle.open(wrappingKey: keys.wrappingKey)) != nil { return keys }
        }
        throw ClientError.notPermitted(code: .invalidCredentials, "the current password is wrong")
    }

    /// Replaces the account's recovery key: a new one is made here and its bundle and verifier sent, proven
    /// by the session, the current password and the current recovery key (nil only for an account that has
    /// none yet); the old key stops working at once. Returns the new key, to be shown once: it is stored nowhere.
    public func rotateRecoveryKey(_ account: UnlockedAccount, password: String, currentRecoveryKey: RecoveryKey?) async throws -> RecoveryKey {
        let auth = try account.sessionAuth
        let proven = try await Self.currentKeys(account, password: password)
        let key = RecoveryKey.generate()
        let enrollment = RecoveryEnrollment(bundle: .seal(account.identity, recoveryKey: key), verifier: key.verifier)
        let request = RecoveryRotationRequest(
            currentLoginKey: Base64URL.encode(proven.loginKey.copyBytes()),
            currentRecoveryLoginKey: currentRecoveryKey?.proof(username: account.profile.username).recoveryLoginKey,
            recovery: enrollment
        )
        _ = try await transport.send(AccountEndpoints.recoveryRotate, request, auth: auth)
        return key
    }

    /// Sets a new password with the recovery key, which ends every session, then logs in with it on this
    /// device. The account's certificate is checked under the pinned admin key before the keys are trusted.
    public func recover(username raw: String, recoveryKey: RecoveryKey, newPassword: String) async throws -> UnlockedAccount {
        let username = Username.lookupKey(raw)
        let proof = recoveryKey.proof(username: username)
        let answer = try await transport.send(AccountEndpoints.recoveryBundle, proof)
        do {
            try answer.certificate.verify(adminKey: configuration.adminKey, userID: answer.userID, username: username, role: answer.role)
        } catch { throw ClientError.integrity("the account certificate does not verify under the pinned admin key: \(error)") }
        let identity = try answer.bundle.open(recoveryKey: recoveryKey, userID: answer.userID)
        try Self.check(identity, matches: answer.certificate)
        let known = try? configuration.home.store(server: configuration.server, username: username).loadProfile()
        let after = known?.userID == answer.userID ? known?.credentialParameters?.changedAt : nil
        let update = try await CredentialUpdate.make(identity: identity, password: newPassword, kdf: configuration.kdf, after: after)
        _ = try await transport.send(AccountEndpoints.recover, RecoveryRequest(proof: proof, update: update))
        // The parameters and salt just chosen, not whatever the server offers next (a fresh device has no
        // profile to compare them with).
        return try await login(username: username, password: newPassword, expecting: (update.kdf, update.salt))
    }

    /// The account's sessions, read page by page (`pageSize` a page), newest first.
    public func sessions(_ account: UnlockedAccount, pageSize: Int = APILimits.maxListLimit) async throws -> [SessionInfo] {
        let sessions = try await ListingPages.all(
            fetch: { after in
                let query = ListingPages.query(after: after, limit: pageSize)
                return try await transport.send(AccountEndpoints.sessions.query(query), auth: try account.sessionAuth)
            },
            items: \.sessions,
            next: \.nextCursor,
            done: \.done
        )
        return sessions.sorted { ($0.createdAt, $1.id) > ($1.createdAt, $0.id) }
    }

    /// Ends one session (by the id `sessions` shows) or, with nil, every session but this one; returns how many.
    public func revokeSessions(_ account: UnlockedAccount, id: String?) async throws -> Int {
        let endpoint = id.map { AccountEndpoints.revokeSession($0.lowercased()) } ?? AccountEndpoints.revokeOtherSessions
        guard id.map({ $0.count == 16 && $0.allSatisfy(\.isHexDigit) }) ?? true else {
            throw ClientError.invalidRequest("a session id is 16 hex digits, as 'sessions' lists them")
        }
        let answer = try await transport.send(endpoint, auth: try account.sessionAuth)
        return answer.revoked
    }

    /// Deletes the patient's account on the server (records, tresors, shares, sessions), proven by the
    /// password or the recovery key besides the session, then erases this device's copies: the profile
    /// folder with its store, keyring, session and remembered key.
    public func deleteAccount(_ account: UnlockedAccount, proof: AccountProof) async throws -> DeleteAccountResponse {
        let auth = try account.sessionAuth
        let body: DeleteAccountRequest
        switch proof {
        case .password(let password):
            let keys = try await Self.currentKeys(account, password: password)
            body = DeleteAccountRequest(confirmUsername: account.profile.username, currentLoginKey: Base64URL.encode(keys.loginKey.copyBytes()))
        case .recoveryKey(let key):
            body = DeleteAccountRequest(
                confirmUsername: account.profile.username,
                recoveryLoginKey: key.proof(username: account.profile.username).recoveryLoginKey
            )
        }
        let answer = try await transport.send(AccountEndpoints.deleteAccount, body, auth: auth)
        Self.erase(account.store)
        return answer
    }

    /// Overwrites and removes every file of a profile folder, then the folder.
    static func erase(_ store: ProfileStore) {
        store.forgetSecrets()
        let files = FileManager.default.enumerator(at: store.folder, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
        for file in files where (try? file.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true { SecureFiles.erase(file) }
        try? FileManager.default.removeItem(at: store.folder)
    }
}
