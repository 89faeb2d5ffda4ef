import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// The LtHash and the state commitment statement against the vectors of Docs/envelope-v1.md §3.4.
@Suite("Core: state commitments")
struct StateCommitmentTests {
    static func ids(_ from: UInt8) -> String { Hex.encode((from..<(from + 32)).map { $0 }) }

    /// The two-element set of the documented vector.
    static func twoHeads() throws -> LtHash {
        var h = LtHash()
        try h.add(recordID: ids(0x00), versionID: ids(0x20))
        try h.add(recordID: ids(0x40), versionID: ids(0x60))
        return h
    }

    @Test func theLtHashVectorAndItsAlgebra() throws {
        let h = try Self.twoHeads()
        #expect(Hex.encode(LtHash().digest) == Self.emptyDigest)
        #expect(Array(h.lanes.prefix(4)) == [18993, 14030, 52340, 33735])
        #expect(Hex.encode(h.digest) == Self.twoDigest)
        // Order does not matter, removing undoes adding, and a different version is a different set.
        var other = LtHash()
        try other.add(recordID: Self.ids(0x40), versionID: Self.ids(0x60))
        try other.add(recordID: Self.ids(0x00), versionID: Self.ids(0x20))
        #expect(other == h)
        try other.remove(recordID: Self.ids(0x40), versionID: Self.ids(0x60))
        try other.add(recordID: Self.ids(0x40), versionID: Self.ids(0x61))
        #expect(other != h)
        try other.remove(recordID: Self.ids(0x40), versionID: Self.ids(0x61))
        try other.remove(recordID: Self.ids(0x00), versionID: Self.ids(0x20))
        #expect(other == LtHash())
        #expect(try LtHash(bytes: h.bytes) == h)
        #expect(throws: EncodingError.self) { try LtHash(bytes: [0]) }
        #expect(throws: EncodingError.self) { try LtHash.headElement(recordID: "zz", versionID: Self.ids(0)) }
    }

    @Test func aHeadSetCountsAndKeepsTheNewestClock() throws {
        var set = HeadSet()
        let t1 = HLCTimestamp(physicalMs: 10, counter: 0, deviceID: "a")
        let t2 = HLCTimestamp(physicalMs: 20, counter: 0, deviceID: "a")
        try set.replace(recordID: Self.ids(0), old: nil, with: .init(versionID: Self.ids(0x20), deleted: false, timestamp: t1))
        let live = HeadSet.Head(versionID: Self.ids(0x20), deleted: false, timestamp: t1)
        try set.replace(recordID: Self.ids(0), old: live, with: .init(versionID: Self.ids(0x21), deleted: true, timestamp: t2))
        #expect(set.live == 0 && set.deleted == 1 && set.newest == t2)
        var expected = LtHash()
        try expected.add(recordID: Self.ids(0), versionID: Self.ids(0x21))
        #expect(set.hash == expected, "the replaced head left the set")
    }

    /// The sum worked out on every core before a store (`LtHash.sum(ofHeads:)`) is the fold one head at a
    /// time, and a set told each head was added beforehand ends where the one-at-a-time set ends: new
    /// records, replaced heads, and a head that replaces itself (an echo, which changes nothing).
    @Test func headsAddedBeforehandGiveTheSameSet() async throws {
        let t = { (ms: UInt64) in HLCTimestamp(physicalMs: ms, counter: 0, deviceID: "a") }
        var start = HeadSet()
        for i in UInt8(0)..<4 {
            try start.replace(recordID: Self.ids(i), old: nil, with: .init(versionID: Self.ids(0x80 + i), deleted: false, timestamp: t(1)))
        }
        // Records 0 and 1 get new heads, 2 comes again as it is, 4…299 are new; record 1's new head is a tombstone.
        var changes: [(recordID: String, old: HeadSet.Head?, head: HeadSet.Head)] = [
            (
                Self.ids(0), .init(versionID: Self.ids(0x80), deleted: false, timestamp: t(1)),
                .init(versionID: Self.ids(0xA0), deleted: false, timestamp: t(5))
            ),
            (
                Self.ids(1), .init(versionID: Self.ids(0x81), deleted: false, timestamp: t(1)),
                .init(versionID: Self.ids(0xA1), deleted: true, timestamp: t(6))
            ),
            (
                Self.ids(2), .init(versionID: Self.ids(0x82), deleted: false, timestamp: t(1)),
                .init(versionID: Self.ids(0x82), deleted: false, timestamp: t(1))
            ),
        ]
        for i in 4..<300 {
            let record = Hex.encode(try BLAKE2b.hash(Array("record \(i)".utf8)))
            let version = Hex.encode(try BLAKE2b.hash(Array("version \(i)".utf8)))
            changes.append((record, nil, .init(versionID: version, deleted: i % 7 == 0, timestamp: t(UInt64(i)))))
        }
        var oneByOne = start
        var sequential = LtHash()
        for c in changes {
            try oneByOne.replace(recordID: c.recordID, old: c.old, with: c.head)
            try sequential.add(recordID: c.recordID, versionID: c.head.versionID)
        }
        let sum = try await LtHash.sum(ofHeads: changes.map { ($0.recordID, $0.head.versionID) })
        #expect(sum == sequential)
        let heads = changes.map { ($0.recordID, $0.head.versionID) }
        #expect(try LtHash.sumNow(ofHeads: heads) == sequential, "the same sum through Dispatch")
        #expect(throws: EncodingError.self) { try LtHash.sumNow(ofHeads: heads + [("zz", Self.ids(0))]) }
        var beforehand = start
        beforehand.hash.add(sum)
        for c in changes { try beforehand.replace(recordID: c.recordID, old: c.old, with: c.head, alreadyAdded: true) }
        #expect(beforehand == oneByOne)
        #expect(
            oneByOne.live == 3 + 296 - UInt64(changes.dropFirst(3).filter(\.head.deleted).count)
                && oneByOne.deleted == 1 + UInt64(changes.dropFirst(3).filter(\.head.deleted).count)
        )
        // A sum that leaves one head out is another set.
        let short = try await LtHash.sum(ofHeads: changes.dropLast().map { ($0.recordID, $0.head.versionID) })
        var missing = start
        missing.hash.add(short)
        for c in changes { try missing.replace(recordID: c.recordID, old: c.old, with: c.head, alreadyAdded: true) }
        #expect(missing.hash != oneByOne.hash)
        #expect(try await LtHash.sum(ofHeads: []) == LtHash())
        await #expect(throws: (any Error).self) { try await LtHash.sum(ofHeads: [("zz", Self.ids(0))]) }
    }

    static let owner = UUID(uuidString: "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0")!
    static let tresor = UUID(uuidString: "5e33abd4-57b7-8418-a999-da77bd6df0c7")!

    static func vectorStatement() throws -> StateCommitment {
        StateCommitment(
            ownerID: owner,
            tresorID: tresor,
            category: "interventions",
            sequence: 7,
            newest: HLCTimestamp(physicalMs: 1_767_225_600_000, counter: 2, deviceID: "dev-0001"),
            live: 3,
            deleted: 1,
            topEpoch: 2,
            tresorVersion: 5,
            digest: Hex.encode(try twoHeads().digest),
            committedAt: 1_767_225_600_123,
            signature: .unsigned
        )
    }

    @Test func theStatementVector() throws {
        #expect(Hex.encode(try Self.vectorStatement().statementBytes) == Self.statementHex)
    }

    @Test func aCommitmentVerifiesOnlyForItsPatientTresorAndCategory() throws {
        let patient = Identity.generate()
        let admin = SigningKeyPair.generate()
        let cert = try Certificate.issue(
            userID: patient.userID,
            username: "pat",
            role: .patient,
            signingKey: patient.signing.publicKey,
            boxKey: patient.box.publicKey,
            issuedAt: 0,
            adminKey: admin
        )
        let tresor = Tresor.id(ownerID: patient.userID, category: "interventions")
        let c = StateCommitment.make(
            patient: patient,
            tresorID: tresor,
            category: "interventions",
            sequence: 1,
            state: HeadSet(),
            topEpoch: 1,
            tresorVersion: 1,
            committedAt: 5
        )
        try c.verify(patient: cert, tresorID: tresor, category: "interventions")
        #expect(c.describes(HeadSet()))
        #expect(throws: TrustError.self) { try c.verify(patient: cert, tresorID: UUID(), category: "interventions") }
        #expect(throws: TrustError.self) { try c.verify(patient: cert, tresorID: tresor, category: "assessments") }
        var tampered = c
        tampered.live = 1
        #expect(throws: TrustError.invalidSignature(what: "state commitment")) {
            try tampered.verify(patient: cert, tresorID: tresor, category: "interventions")
        }
        var bad = c
        bad.digest = "not hex"
        #expect(throws: TrustError.self) { try bad.verify(patient: cert, tresorID: tresor, category: "interventions") }
        // Sequences count from 1 (Docs/envelope-v1.md §3.4): a signed commitment at 0 is malformed.
        var zero = c
        zero.sequence = 0
        zero = zero.signed(by: patient.signing)
        #expect(throws: TrustError.malformed(what: "state commitment", reason: "sequences count from 1")) {
            try zero.verify(patient: cert, tresorID: tresor, category: "interventions")
        }
    }

    // Computed independently of this code (Python: hashlib's BLAKE2b, libsodium's crypto_stream_xchacha20 through ctypes).
    static let emptyDigest = "200823e5158b3774c11b5c61850ada762f8264144a9bebec3ebac5a2adde67b8"
    static let twoDigest = "faf48d2e1f23502311cc5fd68b003d8f879519fda32d99b3816d5adc89e0fe3c"
    static let statementHex =
        "0000001d436172655661756c742d73746174652d636f6d6d69746d656e742d763101000000100f1e2d3c4b5a49788796a5b4c3d2e1f0"
        + "000000105e33abd457b78418a999da77bd6df0c70000000d696e74657276656e74696f6e7300000000000000070000019b76daa80000"
        + "000002000000086465762d303030310000000000000003000000000000000100000002000000000000000500000020faf48d2e1f2350"
        + "2311cc5fd68b003d8f879519fda32d99b3816d5adc89e0fe3c0000019b76daa87b"
}
