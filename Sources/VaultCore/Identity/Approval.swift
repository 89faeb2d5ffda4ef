import Foundation
import VaultCrypto

/// An admin-signed approval of a registration or of a share (Docs/envelope-v1.md §3). It names its
/// subject and carries the hash of exactly what was approved, so it cannot be replayed onto another
/// share or account; the server accepts it only with a valid admin signature, and doctors verify it too.
public struct Approval: Codable, Sendable, Hashable, SignedStatement {
    /// What kind of thing is approved.
    public enum Kind: String, Codable, Sendable { case registration, share }

    public var version: UInt8 = 1
    public var kind: Kind
    /// The user id (registration) or the share id (share).
    public var subjectID: UUID
    /// For a share: patient id, doctor id, tresor id. Empty for a registration.
    public var relatedIDs: [UUID]
    /// BLAKE2b-256 of the approved statement (certificate or grant), base64url on the wire.
    public var approvedHash: String
    public var issuedAt: UnixMillis
    /// The admin's own counter, increasing with every approval it signs.
    public var sequence: UInt64
    public var signature: Signature

    static let domain = "CareVault-approval-v1"

    /// The canonical bytes the admin signs.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.append(kind.rawValue)
        w.append(subjectID)
        w.append(UInt32(relatedIDs.count))
        for id in relatedIDs { w.append(id) }
        w.append((try? Base64URL.decode(approvedHash)) ?? Array(approvedHash.utf8))
        w.append(issuedAt)
        w.append(sequence)
        return w.bytes
    }

    /// Signs an approval of `statementHash` with the admin key.
    public static func sign(
        kind: Kind,
        subjectID: UUID,
        relatedIDs: [UUID] = [],
        statementHash: [UInt8],
        issuedAt: UnixMillis,
        sequence: UInt64,
        adminKey: SigningKeyPair
    ) -> Approval {
        Approval(
            kind: kind,
            subjectID: subjectID,
            relatedIDs: relatedIDs,
            approvedHash: Base64URL.encode(statementHash),
            issuedAt: issuedAt,
            sequence: sequence,
            signature: .unsigned
        )
        .signed(by: adminKey)
    }

    /// Approves a registration by approving its certificate.
    public static func registration(_ certificate: Certificate, issuedAt: UnixMillis, sequence: UInt64, adminKey: SigningKeyPair) -> Approval {
        sign(
            kind: .registration,
            subjectID: certificate.userID,
            statementHash: certificate.statementHash,
            issuedAt: issuedAt,
            sequence: sequence,
            adminKey: adminKey
        )
    }

    /// Approves a share by approving its grant.
    public static func share(id shareID: UUID, grant: Grant, issuedAt: UnixMillis, sequence: UInt64, adminKey: SigningKeyPair) -> Approval {
        sign(
            kind: .share,
            subjectID: shareID,
            relatedIDs: [grant.patientID, grant.memberID, grant.tresorID],
            statementHash: grant.statementHash,
            issuedAt: issuedAt,
            sequence: sequence,
            adminKey: adminKey
        )
    }

    /// Verifies the admin signature, the kind, the subject, and that the approval covers exactly
    /// `statementHash`.
    public func verify(
        adminKey: SigningPublicKey,
        kind expectedKind: Kind,
        subjectID expectedSubject: UUID,
        statementHash: [UInt8],
        relatedIDs expectedRelated: [UUID]? = nil
    ) throws(TrustError) {
        guard version == 1 else { throw .unsupportedVersion(what: "approval", version: version) }
        guard adminKey.isValidSignature(signature, for: statementBytes) else { throw .invalidSignature(what: "approval") }
        guard kind == expectedKind else { throw .mismatch(what: "approval", field: "kind") }
        guard subjectID == expectedSubject else { throw .mismatch(what: "approval", field: "subject") }
        if let expectedRelated, expectedRelated != relatedIDs { throw .mismatch(what: "approval", field: "related ids") }
        guard let hash = try? Base64URL.decode(approvedHash), ConstantTime.equals(hash, statementHash) else {
            throw .hashMismatch(what: "approval")
        }
    }

    /// Verifies a share approval against the grant it is supposed to approve.
    public func verifyShare(adminKey: SigningPublicKey, shareID: UUID, grant: Grant) throws(TrustError) {
        try verify(
            adminKey: adminKey,
            kind: .share,
            subjectID: shareID,
            statementHash: grant.statementHash,
            relatedIDs: [grant.patientID, grant.memberID, grant.tresorID]
        )
    }
}
