import Foundation
import VaultCrypto

/// The two keys a password yields (Docs/envelope-v1.md §2): the login key, which the server checks
/// (it stores only a hash), and the wrapping key, which encrypts the key bundle and never leaves the client.
public struct PasswordKeys: Sendable {
    public let loginKey: SymmetricKey
    public let wrappingKey: SymmetricKey

    static let loginContext = try! KDFContext("CVlogin_")
    static let wrappingContext = try! KDFContext("CVwrap__")

    /// Runs Argon2id with `parameters` (validated against the floor first) and derives both keys.
    public static func derive(password: String, salt: Salt, parameters: KDFParameters) throws(CryptoError) -> PasswordKeys {
        let master = try PasswordHasher.deriveKey(password: password, salt: salt, parameters: parameters)
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
        var w = CanonicalWriter(domain: keysDomain)
        var seed = identity.signing.seed.copyBytes()
        var box = identity.box.secretKey.copyBytes()
        var rid = identity.recordIDKey.copyBytes()
        w.append(seed)
        w.append(box)
        w.append(rid)
        Memory.zero(&seed)
        Memory.zero(&box)
        Memory.zero(&rid)
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
        } catch {
            throw .malformed(what: "key bundle", reason: "\(error)")
        }
    }

    /// Derives the wrapping key from `password` with this bundle's own (validated) parameters and opens it.
    public func open(password: String) throws -> (Identity, PasswordKeys) {
        let keys = try PasswordKeys.derive(password: password, salt: salt, parameters: kdf)
        return (try open(wrappingKey: keys.wrappingKey), keys)
    }
}
