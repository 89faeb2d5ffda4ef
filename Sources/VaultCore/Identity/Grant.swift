import Foundation
import VaultCrypto

/// A patient's signed statement that gives one member (a doctor, or the patient's own key) the epoch
/// keys of one tresor (Docs/envelope-v1.md §3). The keys are sealed to the member's certified box key;
/// the sealed box says nothing about its sender, the patient's signature does.
public struct Grant: Codable, Sendable, Hashable, SignedStatement {
    /// 2 for every grant written now; 1 for grants written before tresor versions existed, still read.
    public var version: UInt8 = 2
    public var patientID: UUID
    public var memberID: UUID
    public var tresorID: UUID
    public var category: String
    /// The patient's tresor version when this grant was made (version 2 only): a self-grant with a higher
    /// version replaces one with a lower, never the other way (Docs/envelope-v1.md §3.2).
    public var tresorVersion: UInt64?
    /// The epochs whose keys are sealed, ascending; empty for a share request, which carries no keys.
    public var epochs: [UInt32]
    /// `crypto_box_seal` of the key list to the member, base64url on the wire.
    public var sealedKeys: String
    public var createdAt: UnixMillis
    public var expiresAt: UnixMillis?
    /// The patient's Ed25519 signature over `statementBytes`.
    public var signature: Signature

    static let domainV1 = "CareVault-grant-v1"
    static let domain = "CareVault-grant-v2"
    static let keysDomain = "CareVault-grant-keys-v1"

    /// The canonical bytes the patient signs (version 1 has no tresor version; Docs/envelope-v1.md §3).
    public var statementBytes: [UInt8] {
        var w = CanonicalWriter(domain: version == 1 ? Self.domainV1 : Self.domain)
        w.append(version)
        w.append(patientID)
        w.append(memberID)
        w.append(tresorID)
        w.append(category)
        if version != 1 { w.append(tresorVersion ?? 0) }
        w.append(UInt32(epochs.count))
        for e in epochs { w.append(e) }
        w.append(try! BLAKE2b.hash((try? Base64URL.decode(sealedKeys)) ?? Array(sealedKeys.utf8)))
        w.append(createdAt)
        w.append(expiresAt)
        return w.bytes
    }

    /// BLAKE2b-256 of the statement: what a share approval covers.
    public var statementHash: [UInt8] { try! BLAKE2b.hash(statementBytes) }

    /// Seals `epochs` of `tresor` (all epochs when nil) to `member` and signs the statement as `patient`.
    /// The member's certificate must verify under the pinned admin key first: that is what stops a server
    /// from substituting its own box key.
    public static func make(
        patient: Identity,
        member: Certificate,
        adminKey: SigningPublicKey,
        tresor: Tresor,
        epochs: [UInt32]? = nil,
        tresorVersion: UInt64 = 1,
        ledger: TresorLedger? = nil,
        createdAt: UnixMillis,
        expiresAt: UnixMillis? = nil
    ) throws(TrustError) -> Grant {
        try member.verify(adminKey: adminKey)
        guard tresor.ownerID == patient.userID else { throw .mismatch(what: "grant", field: "tresor owner") }
        // Only a self-grant carries the ledger (an empty one when none is given): it is sealed to the
        // patient's own box key.
        let isSelf = member.userID == patient.userID
        guard ledger == nil || isSelf else { throw .mismatch(what: "grant", field: "ledger") }
        let ledger = isSelf ? (ledger ?? TresorLedger(version: tresorVersion)) : nil
        let chosen = (epochs ?? Array(tresor.keys.keys)).sorted()
        var w = CanonicalWriter(domain: ledger == nil ? keysDomain : selfKeysDomain)
        w.append(tresor.id)
        w.append(tresor.category)
        w.append(UInt32(chosen.count))
        for e in chosen {
            guard let key = tresor.keys[e] else { throw .mismatch(what: "grant", field: "epoch \(e)") }
            w.append(e)
            var k = key.copyBytes()
            w.append(k)
            Memory.zero(&k)
        }
        ledger?.append(to: &w)
        let sealed = SealedBox.seal(w.bytes, to: member.boxKey)
        w.wipe()
        return Grant(
            patientID: patient.userID,
            memberID: member.userID,
            tresorID: tresor.id,
            category: tresor.category,
            tresorVersion: tresorVersion,
            epochs: chosen,
            sealedKeys: Base64URL.encode(sealed),
            createdAt: createdAt,
            expiresAt: expiresAt,
            signature: .unsigned
        )
        .signed(by: patient.signing)
    }

    /// Verifies the patient's signature under the patient's certificate (which must itself verify under
    /// the admin key) and that the grant names that patient and the tresor of its category.
    public func verify(patient: Certificate, adminKey: SigningPublicKey) throws(TrustError) {
        guard version == 1 || version == 2 else { throw .unsupportedVersion(what: "grant", version: version) }
        guard (version == 2) == (tresorVersion != nil) else { throw .malformed(what: "grant", reason: "tresor version") }
        guard epochs.first.map({ $0 >= 1 }) ?? true, zip(epochs, epochs.dropFirst()).allSatisfy({ $0 < $1 }) else {
            throw .malformed(what: "grant", reason: "epochs count from 1, strictly ascending")
        }
        try patient.verify(adminKey: adminKey, userID: patientID, role: .patient)
        guard patient.signingKey.isValidSignature(signature, for: statementBytes) else { throw .invalidSignature(what: "grant") }
        guard tresorID == Tresor.id(ownerID: patientID, category: category) else { throw .mismatch(what: "grant", field: "tresor") }
    }

    /// Verifies the grant and opens the epoch keys with the member's identity. The opened list must name
    /// the same tresor, category and epochs as the signed statement.
    public func openKeys(member: Identity, patient: Certificate, adminKey: SigningPublicKey, now: UnixMillis? = nil) throws(TrustError) -> Tresor {
        try open(member: member, patient: patient, adminKey: adminKey, now: now).tresor
    }

    /// Opens a version-2 self-grant: the keys and the patient's ledger of members (Docs/envelope-v1.md §3.2).
    /// A version-1 self-grant has no ledger; it opens with an empty one at tresor version 0.
    public func openSelfGrant(identity: Identity, certificate: Certificate, adminKey: SigningPublicKey) throws(TrustError) -> (Tresor, TresorLedger) {
        guard memberID == patientID else { throw .mismatch(what: "self-grant", field: "member") }
        // Tresor versions count from 1; 0 is only what a version-1 self-grant stands for (Docs/envelope-v1.md §3.4).
        guard version == 1 || (tresorVersion ?? 0) >= 1 else { throw .malformed(what: "self-grant", reason: "tresor versions count from 1") }
        let (tresor, ledger) = try open(member: identity, patient: certificate, adminKey: adminKey, now: nil)
        return (tresor, ledger ?? TresorLedger(version: 0))
    }

    func open(
        member: Identity,
        patient: Certificate,
        adminKey: SigningPublicKey,
        now: UnixMillis?
    ) throws(TrustError) -> (tresor: Tresor, ledger: TresorLedger?) {
        try verify(patient: patient, adminKey: adminKey)
        guard memberID == member.userID else { throw .mismatch(what: "grant", field: "member") }
        if let now, let expiresAt, now >= expiresAt { throw .expired(what: "grant") }
        guard !epochs.isEmpty else { throw .mismatch(what: "grant", field: "keys (a share request carries none)") }
        guard let sealed = try? Base64URL.decode(sealedKeys) else { throw .malformed(what: "grant", reason: "sealed keys are not base64url") }
        let opened: SecureBytes
        do { opened = try SealedBox.open(sealed, with: member.box) } catch {
            throw .malformed(what: "grant", reason: "sealed keys do not open for this member")
        }
        // A version-2 self-grant seals the ledger after the keys, under its own label.
        let withLedger = version == 2 && memberID == patientID
        var keys: [UInt32: SymmetricKey] = [:]
        var ledger: TresorLedger?
        do {
            var plain = opened.copyBytes()
            defer { Memory.zero(&plain) }
            var r = try CanonicalReader(plain, domain: withLedger ? Self.selfKeysDomain : Self.keysDomain)
            guard try r.readUUID() == tresorID, try r.readString() == category else { throw TrustError.mismatch(what: "grant keys", field: "tresor") }
            let n = try r.readUInt32()
            guard n == epochs.count else { throw TrustError.mismatch(what: "grant keys", field: "epochs") }
            for expected in epochs {
                let e = try r.readUInt32()
                guard e == expected else { throw TrustError.mismatch(what: "grant keys", field: "epochs") }
                var raw = try r.readBytes()
                defer { Memory.zero(&raw) }
                keys[e] = try SymmetricKey(bytes: raw)
            }
            if withLedger { ledger = try TresorLedger.read(from: &r, version: tresorVersion ?? 0) }
            try r.finish()
        } catch let e as TrustError {
            throw e
        } catch {
            throw .malformed(what: "grant keys", reason: "\(error)")
        }
        return (Tresor(ownerID: patientID, category: category, keys: keys), ledger)
    }

    static let selfKeysDomain = "CareVault-self-grant-keys-v2"

    /// A share request (Docs/design.md §3): a version-2 grant naming the doctor, the tresor and the expiry
    /// with no epochs and no sealed keys. The admin approves its hash; the patient's device delivers the
    /// keys in a successor grant only after it has verified that approval.
    public static func request(
        patient: Identity,
        member: Certificate,
        adminKey: SigningPublicKey,
        ownerID: UUID,
        category: String,
        tresorVersion: UInt64,
        createdAt: UnixMillis,
        expiresAt: UnixMillis?
    ) throws(TrustError) -> Grant {
        try member.verify(adminKey: adminKey)
        guard ownerID == patient.userID, member.userID != patient.userID else { throw .mismatch(what: "share request", field: "parties") }
        return Grant(
            patientID: patient.userID,
            memberID: member.userID,
            tresorID: Tresor.id(ownerID: ownerID, category: category),
            category: category,
            tresorVersion: tresorVersion,
            epochs: [],
            sealedKeys: "",
            createdAt: createdAt,
            expiresAt: expiresAt,
            signature: .unsigned
        )
        .signed(by: patient.signing)
    }

    /// True for a share request: no epochs, no sealed keys.
    public var isRequest: Bool { epochs.isEmpty && sealedKeys.isEmpty }
}
