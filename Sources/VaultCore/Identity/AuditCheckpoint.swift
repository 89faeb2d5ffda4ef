import Foundation
import VaultCrypto

/// An admin-signed checkpoint of the audit chain (Docs/envelope-v1.md §3.1): "the entry at `sequence` has
/// hash `headHash`". The chain's hashes are unkeyed and its head lives in the same database, so whoever
/// writes the database can rewrite history and rehash; a checkpoint pins the history up to `sequence` under
/// a key the server does not hold, and both the admin's tool and a patient's device check the chain against it.
public struct AuditCheckpoint: Codable, Sendable, Hashable, SignedStatement {
    /// The statement version; only 1 exists.
    public var version: UInt8 = 1
    /// The sequence number of the entry whose hash is pinned.
    public var sequence: UInt64
    /// That entry's hash, hex (64 lower-case digits), as in `AuditEntry.hash`; raw bytes in the statement.
    public var headHash: String
    /// When the admin signed it, in Unix milliseconds.
    public var signedAt: UnixMillis
    /// Ed25519 by the admin key over `statementBytes`.
    public var signature: Signature

    static let domain = "CareVault-audit-checkpoint-v1"

    /// A version-1 checkpoint with the given fields (signed already, or `sign` makes one).
    public init(sequence: UInt64, headHash: String, signedAt: UnixMillis, signature: Signature) {
        self.sequence = sequence
        self.headHash = headHash
        self.signedAt = signedAt
        self.signature = signature
    }

    /// The canonical bytes the admin signs. A `headHash` that is not 64 hex digits goes in as its text,
    /// which no admin ever signed, so such a checkpoint can never verify.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.append(sequence)
        w.append(Self.rawHash(headHash) ?? Array(headHash.utf8))
        w.append(signedAt)
        return w.bytes
    }

    /// The 32 bytes of a hash written as 64 lower-case hex digits, or nil for anything else.
    static func rawHash(_ hex: String) -> [UInt8]? {
        guard hex.utf8.count == 64, hex == hex.lowercased(), let raw = try? Hex.decode(hex) else { return nil }
        return raw
    }

    /// Signs a checkpoint of the entry at `sequence` with hash `headHash` (hex) with the admin key.
    public static func sign(sequence: UInt64, headHash: String, signedAt: UnixMillis, adminKey: SigningKeyPair) -> AuditCheckpoint {
        AuditCheckpoint(sequence: sequence, headHash: headHash, signedAt: signedAt, signature: .unsigned).signed(by: adminKey)
    }

    /// `millis` as an ISO 8601 time in UTC, for messages.
    public static func time(_ millis: UnixMillis) -> String {
        Date(timeIntervalSince1970: Double(millis) / 1000).formatted(.iso8601)
    }

    /// Verifies the version, the hash's form and the admin signature.
    public func verify(adminKey: SigningPublicKey) throws(TrustError) {
        guard version == 1 else { throw .unsupportedVersion(what: "audit checkpoint", version: version) }
        guard sequence >= 1, Self.rawHash(headHash) != nil else {
            throw .malformed(what: "audit checkpoint", reason: "it needs a sequence from 1 and a hash of 64 hex digits")
        }
        guard adminKey.isValidSignature(signature, for: statementBytes) else { throw .invalidSignature(what: "audit checkpoint") }
    }
}
