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
    public init(kdf: KDFParameters, salt: Salt) {
        self.kdf = kdf
        self.salt = salt
    }
}

/// Proves the password by its login key.
public struct LoginRequest: Codable, Sendable {
    public var username: String
    /// The 32-byte login key, base64url.
    public var loginKey: String
    public init(username: String, loginKey: String) {
        self.username = username
        self.loginKey = loginKey
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
