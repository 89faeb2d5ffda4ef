import Foundation
import VaultCrypto

/// The two keys a password yields (Docs/envelope-v1.md §2): the login key, which the server checks
/// (it stores only a hash), and the wrapping key, which encrypts the key bundle and never leaves the client.
public struct PasswordKeys: Sendable {
    /// Proves the password to the server.
    public let loginKey: SymmetricKey
    /// Wraps the key bundle; exists only in memory while registering, logging in or unlocking by password.
    public let wrappingKey: SymmetricKey

    static let loginContext = try! KDFContext("CVlogin_")
    static let wrappingContext = try! KDFContext("CVwrap__")

    /// How a password's text becomes Argon2id input (Docs/envelope-v1.md §2).
    public enum Form: Sendable, Equatable {
        /// Unicode NFC, so the same password typed on any keyboard or system gives the same bytes.
        case nfc
        /// The bytes as given: only to open accounts registered before passwords were normalised.
        case raw
    }

    /// The forms worth trying for `password`: NFC, then the raw bytes only when they differ from it
    /// (compared as bytes: Swift's `==` treats canonically equivalent strings as equal).
    public static func forms(of password: String) -> [Form] {
        Array(password.utf8) == Array(password.precomposedStringWithCanonicalMapping.utf8) ? [.nfc] : [.nfc, .raw]
    }

    /// Runs Argon2id with `parameters` (validated against the floor first) and derives both keys, on a
    /// thread of `OffPool`: the task waits, the cooperative pool goes on with other work meanwhile.
    public static func derive(password: String, salt: Salt, parameters: KDFParameters, form: Form = .nfc) async throws -> PasswordKeys {
        // The count of runs (a task-local) follows the work onto its thread.
        let runs = PasswordHasher.runs
        return try await OffPool.run {
            // blocking: on a thread of OffPool
            try PasswordHasher.$runs.withValue(runs) { try deriveBlocking(password: password, salt: salt, parameters: parameters, form: form) }
        }
    }

    /// `derive` on the calling thread: for synchronous code that already runs off the cooperative pool.
    public static func deriveBlocking(
        password: String,
        salt: Salt,
        parameters: KDFParameters,
        form: Form = .nfc
    ) throws(CryptoError) -> PasswordKeys {
        let input = form == .nfc ? password.precomposedStringWithCanonicalMapping : password
        // blocking: deriveBlocking is for callers off the pool (derive runs it on OffPool)
        let master = try PasswordHasher.deriveKey(password: input, salt: salt, parameters: parameters)
        return PasswordKeys(
            loginKey: master.deriveSubkey(id: 1, context: loginContext),
            wrappingKey: master.deriveSubkey(id: 1, context: wrappingContext)
        )
    }

    /// What the server stores to check a login key: a hash, never the key.
    public static func verifier(for loginKey: SymmetricKey) -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-login-verifier-v1")
        w.append(loginKey.copyBytes())
        defer { w.wipe() }
        return try! BLAKE2b.hash(w.bytes)
    }

    /// The verifier of this login key.
    public var loginVerifier: [UInt8] { Self.verifier(for: loginKey) }
}

/// A user's private keys wrapped under the password-derived wrapping key, kept on the server so the user
/// can log in on a new device (Docs/envelope-v1.md §2.1). The KDF parameters and salt are inside the
/// associated data: a server that weakens them makes the bundle fail to open.
public struct KeyBundle: Codable, Sendable, Hashable {
    public var version: UInt8 = 1
    public var userID: UUID
    public var kdf: KDFParameters
    public var salt: Salt
    public var nonce: AEADNonce
    /// XChaCha20-Poly1305 ciphertext of the private keys, base64url on the wire.
    public var ciphertext: String

    static let domain = "CareVault-keybundle-v1"
    static let keysDomain = "CareVault-keybundle-keys-v1"

    func associatedData() -> [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.append(userID)
        w.append(kdf, salt: salt)
        return w.bytes
    }

    /// Wraps `identity` under `wrappingKey`.
    public static func seal(_ identity: Identity, wrappingKey: SymmetricKey, kdf: KDFParameters, salt: Salt) -> KeyBundle {
        var bundle = KeyBundle(userID: identity.userID, kdf: kdf, salt: salt, nonce: .random(), ciphertext: "")
        var w = identity.privateKeys(domain: keysDomain)
        bundle.ciphertext = Base64URL.encode(AEAD.seal(w.bytes, key: wrappingKey, nonce: bundle.nonce, associatedData: bundle.associatedData()))
        w.wipe()
        return bundle
    }

    /// Unwraps the identity. A wrong wrapping key (wrong password) or an altered bundle is
    /// `TrustError.wrongPassword`, never garbage keys.
    public func open(wrappingKey: SymmetricKey) throws(TrustError) -> Identity {
        guard version == 1 else { throw .unsupportedVersion(what: "key bundle", version: version) }
        guard let sealed = try? Base64URL.decode(ciphertext) else { throw .malformed(what: "key bundle", reason: "ciphertext is not base64url") }
        var plain: [UInt8]
        do { plain = try AEAD.open(sealed, key: wrappingKey, nonce: nonce, associatedData: associatedData()) } catch { throw .wrongPassword }
        defer { Memory.zero(&plain) }
        return try Identity(userID: userID, privateKeys: plain, domain: Self.keysDomain, what: "key bundle")
    }

    /// Derives the wrapping key from `password` with this bundle's own (validated) parameters and opens it.
    public func open(password: String) async throws -> (Identity, PasswordKeys) {
        let keys = try await PasswordKeys.derive(password: password, salt: salt, parameters: kdf)
        return (try open(wrappingKey: keys.wrappingKey), keys)
    }
}

extension Identity {
    /// The private keys as sealed in a key bundle or a remembered copy (Docs/envelope-v1.md §2.1):
    /// `string domain || bytes signing seed || bytes box secret || bytes record-id key`. Wipe it after use.
    func privateKeys(domain: String) -> CanonicalWriter {
        var w = CanonicalWriter(domain: domain)
        var seed = signing.seed.copyBytes()
        var box = self.box.secretKey.copyBytes()
        var rid = recordIDKey.copyBytes()
        w.append(seed)
        w.append(box)
        w.append(rid)
        Memory.zero(&seed)
        Memory.zero(&box)
        Memory.zero(&rid)
        return w
    }

    /// Reads the private keys written by `privateKeys(domain:)`; anything else is `malformed`.
    init(userID: UUID, privateKeys plain: [UInt8], domain: String, what: String) throws(TrustError) {
        do {
            var r = try CanonicalReader(plain, domain: domain)
            var seed = try r.readBytes()
            var box = try r.readBytes()
            var rid = try r.readBytes()
            defer {
                Memory.zero(&seed)
                Memory.zero(&box)
                Memory.zero(&rid)
            }
            try r.finish()
            self.init(
                userID: userID,
                signing: try SigningKeyPair(seed: SecureBytes(copying: seed)),
                box: try BoxKeyPair(secretKey: SecureBytes(copying: box)),
                recordIDKey: try SymmetricKey(bytes: rid)
            )
        } catch {
            throw .malformed(what: what, reason: "\(error)")
        }
    }
}

/// A copy of an account's private keys kept on one device, sealed under a random per-device key that
/// `login --remember` stores beside it (Docs/envelope-v1.md §2.2). The device key is no password
/// equivalent: it opens this copy only, and is useless on another device or for another account.
public struct RememberedIdentity: Codable, Sendable, Hashable {
    /// The layout version; 1.
    public var version: UInt8 = 1
    /// Random per copy.
    public var nonce: AEADNonce
    /// XChaCha20-Poly1305 ciphertext of the private keys, base64url.
    public var ciphertext: String

    static let domain = "CareVault-remembered-identity-v1"
    static let keysDomain = "CareVault-remembered-identity-keys-v1"

    static func associatedData(version: UInt8, userID: UUID, server: String) -> [UInt8] {
        var w = CanonicalWriter(domain: domain)
        w.append(version)
        w.append(userID)
        w.append(server)
        return w.bytes
    }

    /// Seals `identity` under `deviceKey` for the account's profile on `server`.
    public static func seal(_ identity: Identity, deviceKey: SymmetricKey, server: String) -> RememberedIdentity {
        var copy = RememberedIdentity(nonce: .random(), ciphertext: "")
        var w = identity.privateKeys(domain: keysDomain)
        let ad = associatedData(version: copy.version, userID: identity.userID, server: server)
        copy.ciphertext = Base64URL.encode(AEAD.seal(w.bytes, key: deviceKey, nonce: copy.nonce, associatedData: ad))
        w.wipe()
        return copy
    }

    /// Opens the copy of `userID`'s keys on `server`. A wrong key, another account or server, or any
    /// altered byte is `malformed` (an integrity failure): this file is never opened with a password.
    public func open(deviceKey: SymmetricKey, userID: UUID, server: String) throws(TrustError) -> Identity {
        guard version == 1 else { throw .unsupportedVersion(what: "remembered key copy", version: version) }
        guard let sealed = try? Base64URL.decode(ciphertext) else {
            throw .malformed(what: "remembered key copy", reason: "ciphertext is not base64url")
        }
        var plain: [UInt8]
        do {
            plain = try AEAD.open(
                sealed,
                key: deviceKey,
                nonce: nonce,
                associatedData: Self.associatedData(version: version, userID: userID, server: server)
            )
        } catch { throw .malformed(what: "remembered key copy", reason: "it does not open under this device's key (altered or damaged)") }
        defer { Memory.zero(&plain) }
        return try Identity(userID: userID, privateKeys: plain, domain: Self.keysDomain, what: "remembered key copy")
    }
}
