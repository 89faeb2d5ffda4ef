import Foundation
import VaultCrypto

/// The patient's signed statement that a share is over (Docs/envelope-v1.md §3.3). The server stores it
/// with the share and shows it to the doctor; a doctor's client that has seen it never trusts that share
/// again, whatever the server lists later.
public struct ShareRevocation: Codable, Sendable, Hashable, SignedStatement {
    public var version: UInt8 = 1
    public var shareID: UUID
    public var patientID: UUID
    public var memberID: UUID
    public var tresorID: UUID
    public var revokedAt: UnixMillis
    /// The patient's Ed25519 signature over `statementBytes`.
    public var signature: Signature

    static let domain = "CareVault-share-revocation-v1"

    /// The canonical bytes the patient signs.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.append(shareID)
        w.append(patientID)
        w.append(memberID)
        w.append(tresorID)
        w.append(revokedAt)
        return w.bytes
    }

    /// Signs the end of share `shareID`, whose request is `request`, as `patient`.
    public static func make(shareID: UUID, request: Grant, patient: Identity, revokedAt: UnixMillis) -> ShareRevocation {
        ShareRevocation(
            shareID: shareID,
            patientID: request.patientID,
            memberID: request.memberID,
            tresorID: request.tresorID,
            revokedAt: revokedAt,
            signature: .unsigned
        )
        .signed(by: patient.signing)
    }

    /// Verifies the patient's signature (under a certificate that verifies under the admin key) and that
    /// the statement ends exactly share `shareID` of `request`'s parties and tresor.
    public func verify(shareID: UUID, request: Grant, patient: Certificate, adminKey: SigningPublicKey) throws(TrustError) {
        guard version == 1 else { throw .unsupportedVersion(what: "revocation", version: version) }
        try patient.verify(adminKey: adminKey, userID: patientID, role: .patient)
        guard patient.signingKey.isValidSignature(signature, for: statementBytes) else { throw .invalidSignature(what: "revocation") }
        guard self.shareID == shareID, patientID == request.patientID, memberID == request.memberID, tresorID == request.tresorID else {
            throw .mismatch(what: "revocation", field: "share")
        }
    }
}
