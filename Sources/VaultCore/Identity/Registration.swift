import Foundation
import VaultCrypto

/// What a new user submits (DESIGN.md §2): public keys, password-hashing parameters, the login
/// verifier and the wrapped key bundle, signed with the new signing key so the server and the admin
/// know the request was made by whoever holds that key. The account stays pending until an admin
/// certificate arrives.
public struct RegistrationRequest: Codable, Sendable, Hashable {
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
        w.append(version); w.append(userID); w.append(username); w.append(role.rawValue)
        w.append(signingKey); w.append(boxKey)
        w.append(kdf.algorithm); w.append(kdf.opsLimit); w.append(kdf.memLimitBytes); w.append(salt)
        w.append(loginVerifier)
        w.append(keyBundle.userID); w.append(keyBundle.nonce); w.append(keyBundle.ciphertext)
        w.append(requestedAt)
        return w.bytes
    }

    /// Builds and signs a registration for `identity`, wrapping its keys under `passwordKeys`.
    public static func make(identity: Identity, username: String, role: Role, passwordKeys: PasswordKeys, kdf: KDFParameters,
                            salt: Salt, requestedAt: UnixMillis) throws(TrustError) -> RegistrationRequest {
        let name = try Username.normalize(username)
        var r = RegistrationRequest(userID: identity.userID, username: name, role: role, signingKey: identity.signing.publicKey,
                                    boxKey: identity.box.publicKey, kdf: kdf, salt: salt,
                                    loginVerifier: Base64URL.encode(passwordKeys.loginVerifier),
                                    keyBundle: KeyBundle.seal(identity, wrappingKey: passwordKeys.wrappingKey, kdf: kdf, salt: salt),
                                    requestedAt: requestedAt, signature: Signature(uncheckedBytes: [UInt8](repeating: 0, count: 64)))
        r.signature = identity.signing.sign(r.statementBytes)
        return r
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

/// How the admin authenticates requests to the server (no password exists for the admin): an Ed25519
/// signature by the admin key over the method, the path with its query, the hash of the body, a
/// timestamp and a random nonce (Ed25519 is deterministic: without the nonce two identical requests in
/// one millisecond would carry one signature). The server accepts a signature once, inside a short window.
public enum AdminRequestSignature {
    /// Header carrying the timestamp (Unix milliseconds).
    public static let timestampHeader = "X-CareVault-Admin-Timestamp"
    /// Header carrying the random nonce (base64url of 16 bytes).
    public static let nonceHeader = "X-CareVault-Admin-Nonce"
    /// Header carrying the base64url signature.
    public static let signatureHeader = "X-CareVault-Admin-Signature"
    /// How far the timestamp may be from the server's clock, either way.
    public static let windowMs: Int64 = 5 * 60 * 1000

    /// The canonical bytes that are signed.
    public static func statement(method: String, pathAndQuery: String, body: [UInt8], timestamp: UnixMillis, nonce: String) -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-admin-request-v1")
        w.append(method.uppercased()); w.append(pathAndQuery); w.append(try! BLAKE2b.hash(body)); w.append(timestamp); w.append(nonce)
        return w.bytes
    }

    /// The three header values of a signed admin request.
    public struct Headers: Sendable, Equatable {
        public var timestamp: String
        public var nonce: String
        public var signature: String
    }

    /// Signs a request with a fresh nonce.
    public static func sign(method: String, pathAndQuery: String, body: [UInt8], timestamp: UnixMillis, adminKey: SigningKeyPair) -> Headers {
        let nonce = Base64URL.encode(RandomBytes.bytes(count: 16))
        let sig = adminKey.sign(statement(method: method, pathAndQuery: pathAndQuery, body: body, timestamp: timestamp, nonce: nonce))
        return Headers(timestamp: String(timestamp), nonce: nonce, signature: sig.base64URL)
    }
}
