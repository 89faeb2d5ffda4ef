import Foundation
import VaultCore
import VaultCrypto

/// The public half of a password change (Docs/envelope-v1.md §2.4): the new parameters and salt, signed by
/// the account's key, served by `/v1/auth/params` to anyone who asks. It carries neither the login
/// verifier nor the key bundle, which would let anyone guess the new password offline; those come only
/// with a login that proved the password.
public struct CredentialParameters: Codable, Sendable, Hashable {
    /// The layout version; 1.
    public var version: UInt8 = 1
    /// The account.
    public var userID: UUID
    /// The Argon2id parameters of the new password.
    public var kdf: KDFParameters
    /// The new password's salt.
    public var salt: Salt
    /// When the change was made (the same instant as its credential update).
    public var changedAt: UnixMillis
    /// Ed25519 by the account's signing key over `statementBytes`.
    public var signature: Signature

    /// The domain label of the signed statement.
    public static let domain = "CareVault-credential-parameters-v1"

    /// Parameters to sign: set `signature` to the account key's signature over `statementBytes`.
    public init(userID: UUID, kdf: KDFParameters, salt: Salt, changedAt: UnixMillis, signature: Signature) {
        self.userID = userID
        self.kdf = kdf
        self.salt = salt
        self.changedAt = changedAt
        self.signature = signature
    }

    /// What the signature covers: `string domain || u8 1 || uuid user id || string algorithm || u64 opsLimit
    /// || u64 memLimitBytes || bytes salt (16) || i64 changed at`.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.append(userID)
        w.append(kdf.algorithm)
        w.append(kdf.opsLimit)
        w.append(kdf.memLimitBytes)
        w.append(salt)
        w.append(changedAt)
        return w.bytes
    }

    /// Whether the version is 1 and the signature verifies under `key`.
    public func isValid(signedBy key: SigningPublicKey) -> Bool {
        version == 1 && key.isValidSignature(signature, for: statementBytes)
    }

    /// Whether these are the parameters, salt, account and instant of `update`.
    public func describe(_ update: CredentialUpdate) -> Bool {
        userID == update.userID && kdf == update.kdf && salt == update.salt && changedAt == update.changedAt
    }
}
