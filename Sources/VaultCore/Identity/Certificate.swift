import Foundation
import VaultCrypto

/// The admin's signed binding of a user id, username and role to that user's public keys
/// (Docs/envelope-v1.md §3). Clients seal to, or trust signatures from, a key only through a certificate
/// that verifies under the pinned admin key, so a server that substitutes a key is caught.
public struct Certificate: Codable, Sendable, Hashable, SignedStatement {
    /// Statement version; 1.
    public var version: UInt8 = 1
    public var userID: UUID
    /// The normalised (lower-case) username.
    public var username: String
    public var role: Role
    public var signingKey: SigningPublicKey
    public var boxKey: BoxPublicKey
    /// When the admin issued it, in Unix milliseconds.
    public var issuedAt: UnixMillis
    /// The admin's Ed25519 signature over `statementBytes`.
    public var signature: Signature

    static let domain = "CareVault-certificate-v1"

    /// The canonical bytes the admin signs.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.appendAccount(userID, username, role, signingKey, boxKey)
        w.append(issuedAt)
        return w.bytes
    }

    /// Issues a certificate, signed with the admin's key.
    public static func issue(
        userID: UUID,
        username: String,
        role: Role,
        signingKey: SigningPublicKey,
        boxKey: BoxPublicKey,
        issuedAt: UnixMillis,
        adminKey: SigningKeyPair
    ) throws(TrustError) -> Certificate {
        let name = try Username.normalize(username)
        return Certificate(
            userID: userID,
            username: name,
            role: role,
            signingKey: signingKey,
            boxKey: boxKey,
            issuedAt: issuedAt,
            signature: .unsigned
        )
        .signed(by: adminKey)
    }

    /// Verifies the admin signature and, when given, that the certificate names the expected user,
    /// username and role. Anything else is a `TrustError`.
    public func verify(
        adminKey: SigningPublicKey,
        userID expectedID: UUID? = nil,
        username expectedName: String? = nil,
        role expectedRole: Role? = nil
    ) throws(TrustError) {
        guard version == 1 else { throw .unsupportedVersion(what: "certificate", version: version) }
        guard adminKey.isValidSignature(signature, for: statementBytes) else { throw .invalidSignature(what: "certificate") }
        if let expectedID, expectedID != userID { throw .mismatch(what: "certificate", field: "user id") }
        if let expectedName, (try? Username.normalize(expectedName)) != username { throw .mismatch(what: "certificate", field: "username") }
        if let expectedRole, expectedRole != role { throw .wrongRole(expected: expectedRole, actual: role) }
    }

    /// BLAKE2b-256 of the statement: what a registration approval covers.
    public var statementHash: [UInt8] { try! BLAKE2b.hash(statementBytes) }

    /// A short, human-comparable fingerprint of the user's signing key (for out-of-band checks).
    public var fingerprint: String { Self.fingerprint(signingKey: signingKey, boxKey: boxKey) }

    /// The fingerprint of a key pair, before or after it is certified (the admin shows it at review).
    public static func fingerprint(signingKey: SigningPublicKey, boxKey: BoxPublicKey) -> String {
        let h = try! BLAKE2b.hash(signingKey.bytes + boxKey.bytes, outputLength: 16)
        return stride(from: 0, to: 16, by: 2).map { Hex.encode(h[$0..<$0 + 2]) }.joined(separator: "-")
    }
}
