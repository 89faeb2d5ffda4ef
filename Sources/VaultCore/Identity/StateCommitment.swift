import Foundation
import VaultCrypto

/// The patient's signed statement of what one tresor holds at the server (Docs/envelope-v1.md §3.4):
/// the LtHash digest of its record heads, their counts and newest HLC, numbered per tresor. A reader
/// whose own copy of the heads hashes to the digest of the newest commitment holds the complete and
/// current set as of `committedAt`; one that does not was shown an old, partial or altered view.
public struct StateCommitment: Codable, Sendable, Hashable, SignedStatement {
    /// The statement version; only 1 exists.
    public var version: UInt8 = 1
    /// The patient.
    public var ownerID: UUID
    /// The tresor described.
    public var tresorID: UUID
    /// The tresor's category.
    public var category: String
    /// Per tresor, one more than the commitment it follows (the first may take any value).
    public var sequence: UInt64
    /// The newest HLC among the heads (`HeadSet.noTimestamp` for none).
    public var newest: HLCTimestamp
    /// Live heads.
    public var live: UInt64
    /// Tombstone heads.
    public var deleted: UInt64
    /// The tresor's newest key epoch when committed.
    public var topEpoch: UInt32
    /// The tresor version of the patient's newest self-grant when committed (Docs/envelope-v1.md §3.2).
    public var tresorVersion: UInt64
    /// BLAKE2b-256 of the heads' LtHash state, 64 lower-case hex digits (raw bytes in the statement).
    public var digest: String
    /// When the patient's device signed it, Unix milliseconds.
    public var committedAt: UnixMillis
    /// Ed25519 by the patient's signing key over `statementBytes`.
    public var signature: Signature

    static let domain = "CareVault-state-commitment-v1"

    /// The canonical bytes the patient signs. A digest that is not 64 hex digits goes in as its text,
    /// which no patient ever signed, so such a commitment never verifies.
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(version)
        w.append(ownerID)
        w.append(tresorID)
        w.append(category)
        w.append(sequence)
        w.append(newest.physicalMs)
        w.append(newest.counter)
        w.append(newest.deviceID)
        w.append(live)
        w.append(deleted)
        w.append(topEpoch)
        w.append(tresorVersion)
        w.append(AuditCheckpoint.rawHash(digest) ?? Array(digest.utf8))
        w.append(committedAt)
        return w.bytes
    }

    /// Signs the commitment to `state` of `tresorID` (`category`) at `sequence` as `patient`.
    public static func make(
        patient: Identity,
        tresorID: UUID,
        category: String,
        sequence: UInt64,
        state: HeadSet,
        topEpoch: UInt32,
        tresorVersion: UInt64,
        committedAt: UnixMillis
    ) -> StateCommitment {
        StateCommitment(
            ownerID: patient.userID,
            tresorID: tresorID,
            category: category,
            sequence: sequence,
            newest: state.newest,
            live: state.live,
            deleted: state.deleted,
            topEpoch: topEpoch,
            tresorVersion: tresorVersion,
            digest: Hex.encode(state.hash.digest),
            committedAt: committedAt,
            signature: .unsigned
        )
        .signed(by: patient.signing)
    }

    /// Verifies the version, the patient's signature (`patient` must already be trusted) and that it
    /// describes `tresorID` (`category`) of that patient.
    public func verify(patient: Certificate, tresorID: UUID, category: String) throws(TrustError) {
        guard version == 1 else { throw .unsupportedVersion(what: "state commitment", version: version) }
        guard sequence >= 1 else { throw .malformed(what: "state commitment", reason: "sequences count from 1") }
        guard AuditCheckpoint.rawHash(digest) != nil else { throw .malformed(what: "state commitment", reason: "its digest is not 64 hex digits") }
        guard ownerID == patient.userID else { throw .mismatch(what: "state commitment", field: "patient") }
        guard patient.signingKey.isValidSignature(signature, for: statementBytes) else { throw .invalidSignature(what: "state commitment") }
        guard self.tresorID == tresorID, self.category.utf8.elementsEqual(category.utf8) else {
            throw .mismatch(what: "state commitment", field: "tresor")
        }
    }

    /// True when `state` is exactly the set this commitment describes.
    public func describes(_ state: HeadSet) -> Bool {
        digest == Hex.encode(state.hash.digest) && live == state.live && deleted == state.deleted && newest == state.newest
    }
}
