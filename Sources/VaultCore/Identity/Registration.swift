import Foundation
import VaultCrypto

/// What a new user submits (Docs/design.md §2): public keys, password-hashing parameters, the login
/// verifier and the wrapped key bundle, signed with the new signing key so the server and the admin
/// know the request was made by whoever holds that key. The account stays pending until an admin
/// certificate arrives.
public struct RegistrationRequest: Codable, Sendable, Hashable, SignedStatement {
    public var version: UInt8 = 1
    public var userID: UUID
    public var username: String
    public var role: Role
    public var signingKey: SigningPublicKey
    public var boxKey: BoxPublicKey
    public var kdf: KDFParameters
    public var salt: Salt
    /// The hash of the login key (base64url), Docs/envelope-v1.md §2.
    public var loginVerifier: String
    public var keyBundle: KeyBundle
    public var requestedAt: UnixMillis
    /// Ed25519 signature by `signingKey` over `statementBytes`.
    public var signature: Signature

    static let domain = "CareVault-registration-v1"

    /// The canonical bytes the new user signs. The key bundle is covered through its fields.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.appendAccount(userID, username, role, signingKey, boxKey)
        w.append(kdf, salt: salt)
        w.append(loginVerifier)
        w.append(keyBundle.userID)
        w.append(keyBundle.nonce)
        w.append(keyBundle.ciphertext)
        w.append(requestedAt)
        return w.bytes
    }

    /// Builds and signs a registration for `identity`, wrapping its keys under `passwordKeys`.
    public static func make(
        identity: Identity,
        username: String,
        role: Role,
        passwordKeys: PasswordKeys,
        kdf: KDFParameters,
        salt: Salt,
        requestedAt: UnixMillis
    ) throws(TrustError) -> RegistrationRequest {
        let name = try Username.normalize(username)
        return RegistrationRequest(
            userID: identity.userID,
            username: name,
            role: role,
            signingKey: identity.signing.publicKey,
            boxKey: identity.box.publicKey,
            kdf: kdf,
            salt: salt,
            loginVerifier: Base64URL.encode(passwordKeys.loginVerifier),
            keyBundle: KeyBundle.seal(identity, wrappingKey: passwordKeys.wrappingKey, kdf: kdf, salt: salt),
            requestedAt: requestedAt,
            signature: .unsigned
        )
        .signed(by: identity.signing)
    }

    /// Checks the self-signature and internal consistency (normalised username, bundle for this user,
    /// same parameters and salt inside the bundle, a 32-byte verifier).
    public func verify() throws(TrustError) {
        guard version == 1 else { throw .unsupportedVersion(what: "registration", version: version) }
        guard (try? Username.normalize(username)) == username else { throw .invalidUsername(username) }
        guard keyBundle.userID == userID, keyBundle.kdf == kdf, keyBundle.salt == salt else {
            throw .mismatch(what: "registration", field: "key bundle")
        }
        guard let v = try? Base64URL.decode(loginVerifier), v.count == 32 else {
            throw .malformed(what: "registration", reason: "login verifier must be 32 bytes of base64url")
        }
        guard signingKey.isValidSignature(signature, for: statementBytes) else { throw .invalidSignature(what: "registration") }
    }

    /// Whether `certificate` certifies exactly this registration's user, name, role and keys.
    public func matches(_ certificate: Certificate) -> Bool {
        certificate.userID == userID && certificate.username == username && certificate.role == role
            && certificate.signingKey == signingKey && certificate.boxKey == boxKey
    }
}
