import Foundation
import VaultCore
import VaultCrypto

// MARK: Accounts and authentication

/// The answer to a registration: the account id and its state.
public struct RegisterResponse: Codable, Sendable, Equatable {
    public var userID: UUID
    public var status: AccountStatus
    public init(userID: UUID, status: AccountStatus) {
        self.userID = userID
        self.status = status
    }
}

/// Asks for the password-hashing parameters of a username.
public struct LoginParametersRequest: Codable, Sendable {
    public var username: String
    public init(username: String) { self.username = username }
}

/// The password-hashing parameters of a username. For an unknown username they are stable fakes,
/// so the answer does not tell who has an account.
public struct LoginParametersResponse: Codable, Sendable, Equatable {
    public var kdf: KDFParameters
    public var salt: Salt
    /// The signed parameters of the account's newest password change, when the password was changed since
    /// registration: what lets a device that stored the older salt accept the new one (Docs/envelope-v1.md §2.4).
    public var credentialParameters: CredentialParameters? = nil
    public init(kdf: KDFParameters, salt: Salt, credentialParameters: CredentialParameters? = nil) {
        self.kdf = kdf
        self.salt = salt
        self.credentialParameters = credentialParameters
    }
}

/// Proves the password by its login key.
public struct LoginRequest: Codable, Sendable {
    public var username: String
    /// The 32-byte login key, base64url.
    public var loginKey: String
    /// A name for the device, shown in the account's session list (at most 64 characters).
    public var deviceName: String? = nil
    public init(username: String, loginKey: String, deviceName: String? = nil) {
        self.username = username
        self.loginKey = loginKey
        self.deviceName = deviceName
    }
}

/// A session, with what a new device needs: the wrapped key bundle and the user's certificate.
public struct LoginResponse: Codable, Sendable {
    public var token: String
    public var expiresAt: UnixMillis
    public var userID: UUID
    public var role: Role
    public var keyBundle: KeyBundle
    public var certificate: Certificate
    public init(token: String, expiresAt: UnixMillis, userID: UUID, role: Role, keyBundle: KeyBundle, certificate: Certificate) {
        self.token = token
        self.expiresAt = expiresAt
        self.userID = userID
        self.role = role
        self.keyBundle = keyBundle
        self.certificate = certificate
    }
}

/// A user's certificate from the key directory.
public struct DirectoryEntry: Codable, Sendable, Equatable {
    public var certificate: Certificate
    public init(certificate: Certificate) { self.certificate = certificate }
}

// MARK: Tresors

/// Declares a tresor, or a new key epoch of it, with the patient's grant of its keys to the patient's own
/// key (how the patient's other devices receive them).
public struct PutTresorRequest: Codable, Sendable {
    public var selfGrant: Grant
    public init(selfGrant: Grant) { self.selfGrant = selfGrant }
}

/// A tresor as the server knows it: owner, category, newest epoch and the owner's self-grant.
public struct TresorInfo: Codable, Sendable, Equatable {
    public var tresorID: UUID
    public var ownerID: UUID
    public var category: String
    public var currentEpoch: UInt32
    public var selfGrant: Grant
    public var updatedAt: UnixMillis
    public init(tresorID: UUID, ownerID: UUID, category: String, currentEpoch: UInt32, selfGrant: Grant, updatedAt: UnixMillis) {
        self.tresorID = tresorID
        self.ownerID = ownerID
        self.category = category
        self.currentEpoch = currentEpoch
        self.selfGrant = selfGrant
        self.updatedAt = updatedAt
    }
}

/// The patient's tresors.
public struct TresorList: Codable, Sendable {
    public var tresors: [TresorInfo]
    public init(tresors: [TresorInfo]) { self.tresors = tresors }
}

// MARK: Account lifecycle (Docs/design.md §2)

/// New password credentials of an account, signed by the account's own signing key
/// (Docs/envelope-v1.md §2.4): Argon2id parameters, salt, login verifier and the key bundle wrapped
/// under the new password. The signature lets a device that stored the older salt accept the new one.
public struct CredentialUpdate: Codable, Sendable, Hashable {
    /// The layout version; 1.
    public var version: UInt8 = 1
    /// The account.
    public var userID: UUID
    /// The Argon2id parameters of the new password.
    public var kdf: KDFParameters
    /// The new password's random salt.
    public var salt: Salt
    /// Hash of the new login key, base64url (Docs/envelope-v1.md §2).
    public var loginVerifier: String
    /// The private keys wrapped under the new password's wrapping key.
    public var keyBundle: KeyBundle
    /// When the change was made.
    public var changedAt: UnixMillis
    /// Ed25519 by the account's signing key over `statementBytes`.
    public var signature: Signature
    /// The same change's parameters and salt, signed on their own: what `/v1/auth/params` serves. Required
    /// by the server for every new update.
    public var parameters: CredentialParameters?

    /// The domain label of the signed statement.
    public static let domain = "CareVault-credential-update-v1"

    /// A credential update; sign `statementBytes` and set `signature` before sending.
    public init(
        userID: UUID,
        kdf: KDFParameters,
        salt: Salt,
        loginVerifier: String,
        keyBundle: KeyBundle,
        changedAt: UnixMillis,
        signature: Signature
    ) {
        self.userID = userID
        self.kdf = kdf
        self.salt = salt
        self.loginVerifier = loginVerifier
        self.keyBundle = keyBundle
        self.changedAt = changedAt
        self.signature = signature
    }

    /// What the signature covers: `string domain || u8 1 || uuid user id || string algorithm || u64 opsLimit
    /// || u64 memLimitBytes || bytes salt (16) || string login verifier || bytes nonce (24) || string ciphertext
    /// || i64 changed at`. The bundle's own associated data binds its parameters and salt again.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.append(userID)
        w.append(kdf.algorithm)
        w.append(kdf.opsLimit)
        w.append(kdf.memLimitBytes)
        w.append(salt)
        w.append(loginVerifier)
        w.append(keyBundle.nonce)
        w.append(keyBundle.ciphertext)
        w.append(changedAt)
        return w.bytes
    }

    /// Whether the signature verifies under `key` and the fields agree with the bundle they carry.
    public func isValid(signedBy key: SigningPublicKey) -> Bool {
        version == 1 && keyBundle.userID == userID && keyBundle.kdf == kdf && keyBundle.salt == salt
            && key.isValidSignature(signature, for: statementBytes)
    }
}

/// The account's private keys wrapped under a key derived from its recovery key (Docs/envelope-v1.md §2.3).
public struct RecoveryBundle: Codable, Sendable, Hashable {
    /// The layout version; 1.
    public var version: UInt8 = 1
    /// The account.
    public var userID: UUID
    /// Random per bundle.
    public var nonce: AEADNonce
    /// XChaCha20-Poly1305 ciphertext of the private keys, base64url.
    public var ciphertext: String
    /// A recovery bundle as sealed by the client.
    public init(userID: UUID, nonce: AEADNonce, ciphertext: String) {
        self.userID = userID
        self.nonce = nonce
        self.ciphertext = ciphertext
    }
}

/// What registration stores besides the signed request: the recovery bundle and the recovery verifier.
public struct RecoveryEnrollment: Codable, Sendable, Hashable {
    /// The private keys wrapped under the recovery wrapping key.
    public var bundle: RecoveryBundle
    /// Hash of the recovery login key, base64url (Docs/envelope-v1.md §2.3).
    public var verifier: String
    /// An enrollment of `bundle` checked by `verifier`.
    public init(bundle: RecoveryBundle, verifier: String) {
        self.bundle = bundle
        self.verifier = verifier
    }
}

/// The body of `POST /v1/accounts/register`: the signed registration request with, beside its fields,
/// an optional `recovery` enrollment (older clients send none).
public struct RegistrationSubmission: Codable, Sendable {
    /// The self-signed request, encoded at the top level of the body as before.
    public var request: RegistrationRequest
    /// The recovery bundle and verifier.
    public var recovery: RecoveryEnrollment?
    private enum Keys: String, CodingKey { case recovery }

    /// A registration with its recovery enrollment.
    public init(request: RegistrationRequest, recovery: RecoveryEnrollment?) {
        self.request = request
        self.recovery = recovery
    }

    /// Reads the request's fields and the optional `recovery` from one object.
    public init(from decoder: any Decoder) throws {
        request = try RegistrationRequest(from: decoder)
        recovery = try decoder.container(keyedBy: Keys.self).decodeIfPresent(RecoveryEnrollment.self, forKey: .recovery)
    }

    /// Writes the request's fields and `recovery` into one object.
    public func encode(to encoder: any Encoder) throws {
        try request.encode(to: encoder)
        var c = encoder.container(keyedBy: Keys.self)
        try c.encodeIfPresent(recovery, forKey: .recovery)
    }
}

/// Changes the password: proves the current one and carries the new credentials (`POST /v1/accounts/password`).
public struct PasswordChangeRequest: Codable, Sendable {
    /// The current login key, base64url: a session alone cannot change the password.
    public var currentLoginKey: String
    /// The new credentials.
    public var update: CredentialUpdate
    /// A change proven by `currentLoginKey`.
    public init(currentLoginKey: String, update: CredentialUpdate) {
        self.currentLoginKey = currentLoginKey
        self.update = update
    }
}

/// Proves a recovery key (`POST /v1/auth/recovery/bundle`).
public struct RecoveryProof: Codable, Sendable {
    /// The account's username.
    public var username: String
    /// The 32-byte recovery login key, base64url.
    public var recoveryLoginKey: String
    /// A proof for `username`.
    public init(username: String, recoveryLoginKey: String) {
        self.username = username
        self.recoveryLoginKey = recoveryLoginKey
    }
}

/// What a proven recovery key gets: the recovery bundle and what to check it against.
public struct RecoveryBundleResponse: Codable, Sendable {
    /// The account.
    public var userID: UUID
    /// Its role.
    public var role: Role
    /// The private keys under the recovery wrapping key.
    public var bundle: RecoveryBundle
    /// The account's certificate, to be verified under the pinned admin key.
    public var certificate: Certificate
    /// The answer for one account.
    public init(userID: UUID, role: Role, bundle: RecoveryBundle, certificate: Certificate) {
        self.userID = userID
        self.role = role
        self.bundle = bundle
        self.certificate = certificate
    }
}

/// Sets a new password with the recovery key (`POST /v1/auth/recovery`); every session ends.
public struct RecoveryRequest: Codable, Sendable {
    /// The recovery proof, as for the bundle.
    public var proof: RecoveryProof
    /// The new credentials.
    public var update: CredentialUpdate
    /// A recovery of `proof`'s account with `update`.
    public init(proof: RecoveryProof, update: CredentialUpdate) {
        self.proof = proof
        self.update = update
    }
}

/// One session of the caller's account, as `GET /v1/sessions` lists it.
public struct SessionInfo: Codable, Sendable, Equatable {
    /// The first 16 hex digits of the token's hash: names the session, is no credential.
    public var id: String
    /// The name the device gave at login, if any.
    public var deviceName: String?
    /// When it was made.
    public var createdAt: UnixMillis
    /// When it was last used (updated at most once a minute), if known.
    public var lastUsedAt: UnixMillis?
    /// When it expires.
    public var expiresAt: UnixMillis
    /// Whether this is the session of the request.
    public var current: Bool
    /// A session as listed.
    public init(id: String, deviceName: String?, createdAt: UnixMillis, lastUsedAt: UnixMillis?, expiresAt: UnixMillis, current: Bool) {
        self.id = id
        self.deviceName = deviceName
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.expiresAt = expiresAt
        self.current = current
    }
}

/// A page of the caller's sessions, by id (`GET /v1/sessions?after=…&limit=…`).
public struct SessionList: Codable, Sendable {
    /// By id, ascending.
    public var sessions: [SessionInfo]
    /// Pass as `after` for the next page: the last session's id, or the `after` sent when the page is empty.
    public var nextCursor: String?
    /// True when no session follows this page.
    public var done: Bool
    /// The page.
    public init(sessions: [SessionInfo], nextCursor: String? = nil, done: Bool = true) {
        self.sessions = sessions
        self.nextCursor = nextCursor
        self.done = done
    }
}

/// How many sessions a revocation ended.
public struct RevokedSessions: Codable, Sendable, Equatable {
    /// The count.
    public var revoked: Int
    /// The answer.
    public init(revoked: Int) { self.revoked = revoked }
}

/// Deletes the caller's patient account and all its data (`POST /v1/accounts/delete`). Besides the
/// session it needs exactly one proof: the current login key (the password) or the recovery login key,
/// so a stolen session alone cannot delete the account.
public struct DeleteAccountRequest: Codable, Sendable {
    /// The account's username again, so a stray request cannot delete it.
    public var confirmUsername: String
    /// The current login key, base64url.
    public var currentLoginKey: String?
    /// The recovery login key, base64url (Docs/envelope-v1.md §2.3), for a user who lost the password.
    public var recoveryLoginKey: String?
    /// A deletion confirmed with `confirmUsername` and proven by one of the keys.
    public init(confirmUsername: String, currentLoginKey: String? = nil, recoveryLoginKey: String? = nil) {
        self.confirmUsername = confirmUsername
        self.currentLoginKey = currentLoginKey
        self.recoveryLoginKey = recoveryLoginKey
    }
}

/// Replaces the account's recovery key (`POST /v1/accounts/recovery`): the session, the current login key,
/// the current recovery login key when the account has one, and the new key's enrollment. The old recovery
/// key stops working at once.
public struct RecoveryRotationRequest: Codable, Sendable {
    /// The current login key, base64url: a session alone cannot replace the recovery key.
    public var currentLoginKey: String
    /// The current recovery login key, base64url (the one `RecoveryProof` carries): required when the account
    /// has a recovery key, so that someone who learned the password cannot take the owner's way back away.
    public var currentRecoveryLoginKey: String?
    /// The new recovery bundle and verifier.
    public var recovery: RecoveryEnrollment
    /// A rotation proven by `currentLoginKey` and, when the account has one, `currentRecoveryLoginKey`.
    public init(currentLoginKey: String, currentRecoveryLoginKey: String? = nil, recovery: RecoveryEnrollment) {
        self.currentLoginKey = currentLoginKey
        self.currentRecoveryLoginKey = currentRecoveryLoginKey
        self.recovery = recovery
    }
}

/// What the deletion removed.
public struct DeleteAccountResponse: Codable, Sendable, Equatable {
    /// Record versions removed.
    public var versions: Int
    /// Tresors removed.
    public var tresors: Int
    /// Shares ended and removed.
    public var shares: Int
    /// The counts.
    public init(versions: Int, tresors: Int, shares: Int) {
        self.versions = versions
        self.tresors = tresors
        self.shares = shares
    }
}
