import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// The statements of Docs/envelope-v1.md §3 (grant version 2, the sealed ledger of a self-grant, §3.2) and
/// §3.3 (share revocation): their bytes against the documented vectors, and the ledger's rules.
@Suite("Membership statements and the ledger")
struct MembershipStatementTests {
    static let patient = UUID(uuidString: "0F1E2D3C-4B5A-4978-8796-A5B4C3D2E1F0")!
    static let doctor = UUID(uuidString: "11111111-2222-4333-8444-555555555555")!
    static let share = UUID(uuidString: "66666666-7777-4888-8999-AAAAAAAAAAAA")!

    /// The share request of the §3 vector: no epochs, no sealed keys, tresor version 3, an expiry.
    static var request: Grant {
        Grant(
            patientID: patient,
            memberID: doctor,
            tresorID: Tresor.id(ownerID: patient, category: "interventions"),
            category: "interventions",
            tresorVersion: 3,
            epochs: [],
            sealedKeys: "",
            createdAt: 1_700_000_000_000,
            expiresAt: 1_800_000_000_000,
            signature: .unsigned
        )
    }

    @Test func requestStatementMatchesTheDocumentedBytes() throws {
        let bytes = Self.request.statementBytes
        var w = CanonicalWriter(domain: "CareVault-grant-v2")
        w.append(UInt8(2))
        w.append(Self.patient)
        w.append(Self.doctor)
        w.append(Tresor.id(ownerID: Self.patient, category: "interventions"))
        w.append("interventions")
        w.append(UInt64(3))
        w.append(UInt32(0))
        w.append(try BLAKE2b.hash([]))
        w.append(Int64(1_700_000_000_000))
        w.append(Int64?(1_800_000_000_000))
        #expect(bytes == w.bytes, "the fields of §3 in order")
        let doc = try SpecVectors.doc("envelope-v1.md")
        #expect(SpecVectors.hexBlock(after: "Vector (share request)", in: doc) == Hex.encode(bytes))
    }

    @Test func revocationStatementMatchesTheDocumentedBytes() throws {
        let r = ShareRevocation(
            shareID: Self.share,
            patientID: Self.patient,
            memberID: Self.doctor,
            tresorID: Tresor.id(ownerID: Self.patient, category: "interventions"),
            revokedAt: 1_750_000_000_000,
            signature: .unsigned
        )
        var w = CanonicalWriter(domain: "CareVault-share-revocation-v1")
        w.append(UInt8(1))
        w.append(Self.share)
        w.append(Self.patient)
        w.append(Self.doctor)
        w.append(Tresor.id(ownerID: Self.patient, category: "interventions"))
        w.append(Int64(1_750_000_000_000))
        #expect(r.statementBytes == w.bytes)
        let doc = try SpecVectors.doc("envelope-v1.md")
        #expect(SpecVectors.hexBlock(after: "Vector (revocation)", in: doc) == Hex.encode(r.statementBytes))
    }

    @Test func aVersionOneGrantKeepsItsOldBytesAndAVersionTwoGrantNeedsItsVersion() throws {
        var old = Self.request
        old.version = 1
        old.tresorVersion = nil
        #expect(old.statementBytes.starts(with: CanonicalWriter(domain: "CareVault-grant-v1").bytes))
        let admin = SigningKeyPair.generate()
        let identity = Identity.generate(userID: Self.patient)
        let cert = try Certificate.issue(
            userID: Self.patient,
            username: "pat",
            role: .patient,
            signingKey: identity.signing.publicKey,
            boxKey: identity.box.publicKey,
            issuedAt: 1,
            adminKey: admin
        )
        var missing = Self.request.signed(by: identity.signing)
        missing.tresorVersion = nil
        #expect(throws: TrustError.self) { try missing.verify(patient: cert, adminKey: admin.publicKey) }
        try Self.request.signed(by: identity.signing).verify(patient: cert, adminKey: admin.publicKey)
        try old.signed(by: identity.signing).verify(patient: cert, adminKey: admin.publicKey)
    }

    @Test func aSuccessorNeverGoesBackInTresorVersion() {
        var later = Self.request
        later.epochs = [1, 2]
        later.tresorVersion = 4
        #expect(later.isSuccessor(of: Self.request))
        later.tresorVersion = 2
        #expect(!later.isSuccessor(of: Self.request), "a grant from an older tresor version does not replace a newer one")
    }

    static func member(_ status: LedgerMember.Status, at: Int64, expires: Int64? = nil, share: UUID = share) -> LedgerMember {
        LedgerMember(shareID: share, memberID: doctor, username: "doc", status: status, expiresAt: expires, changedAt: at)
    }

    @Test func theLedgerNeverMovesBackAndEndsAreFinal() {
        var ledger = TresorLedger(version: 1)
        ledger.record(Self.member(.requested, at: 1))
        ledger.record(Self.member(.delivered, at: 2))
        ledger.record(Self.member(.requested, at: 3))
        #expect(ledger.members[Self.share]?.status == .delivered, "a member never moves back")
        ledger.record(Self.member(.revoked, at: 4))
        ledger.record(Self.member(.expired, at: 5))
        #expect(ledger.members[Self.share]?.status == .revoked, "an end is final")
        #expect(ledger.recipients(at: 10).isEmpty)
    }

    @Test func twoDevicesLedgersMergeToTheLaterStatusWhateverTheOrder() {
        var a = TresorLedger(version: 4)
        a.record(Self.member(.delivered, at: 2))
        var b = TresorLedger(version: 5)
        b.record(Self.member(.revoked, at: 3))
        var ab = a
        ab.merge(b)
        var ba = b
        ba.merge(a)
        #expect(ab == ba && ab.version == 5 && ab.members[Self.share]?.status == .revoked)
    }

    @Test func expiredMembersAreDueAndReceiveNothing() {
        var ledger = TresorLedger(version: 1)
        ledger.record(Self.member(.delivered, at: 1, expires: 100))
        #expect(ledger.recipients(at: 99).count == 1)
        #expect(ledger.recipients(at: 100).isEmpty)
        #expect(ledger.dueToExpire(at: 100).map(\.shareID) == [Self.share])
    }

    @Test func theSealedLedgerRoundTripsAndRefusesDuplicatesAndUnknownStatuses() throws {
        var ledger = TresorLedger(version: 7)
        ledger.record(Self.member(.delivered, at: 1, expires: 100))
        ledger.record(Self.member(.requested, at: 2, share: UUID()))
        var w = CanonicalWriter(domain: "x")
        ledger.append(to: &w)
        var r = try CanonicalReader(w.bytes, domain: "x")
        #expect(try TresorLedger.read(from: &r, version: 7) == ledger)
        var bad = w.bytes
        // The status byte of the first member sits after its two uuids and the username.
        let statusOffset = CanonicalWriter(domain: "x").bytes.count + 4 + 20 + 20 + 7
        bad[statusOffset] = 9
        var rb = try CanonicalReader(bad, domain: "x")
        #expect(throws: (any Error).self) { _ = try TresorLedger.read(from: &rb, version: 7) }
    }
}
