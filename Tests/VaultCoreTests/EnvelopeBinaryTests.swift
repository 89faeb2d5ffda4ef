import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// The binary encoding of envelopes, batches and pull pages (Docs/envelope-v1.md §7): the doc's vectors
/// byte for byte, round trips, and every way a hostile server or peer can bend the framing.
@Suite("Envelope binary encoding")
struct EnvelopeBinaryTests {
    // The vectors of Docs/envelope-v1.md §7.4. Changing one of these changes the format.
    static let firstHex = """
        01000000100f1e2d3c4b5a49788796a5b4c3d2e1f0000000105e33abd457b784
        18a999da77bd6df0c70000000d696e74657276656e74696f6e73000000010200
        000020c0e2f8974222231f96afaf5893b21a5b3d92a36cddce8d82562cb2077d
        9c657c0000018bcfe5687b00000000000000086465762d303030310000000010
        0f1e2d3c4b5a49788796a5b4c3d2e1f000000018606162636465666768696a6b
        6c6d6e6f707172737475767700000110cefbde53226b3b454635c754231160ca
        5b88f2587718b6466a3f5117f91a46cdc594a53d989d02ee3e4f85ae074c64c9
        8d0cfbb2aa7a2285c1ed8dbeadcb8494a9eecc8bc8ab8a157d5f05a0a691e6a8
        e1caa4d1825b74377a528e6d1e6e9d88f371b4c50106a53077ba2a434fde1227
        47b043489a2308c79523aa77952e474ae945f986fcc3c1f2372f0e313d86ee67
        47583257393a9653c64f947840771a22133c67d13439c218a78b409b6a9142c1
        9ac352b742faf4df5540628f945e46d95fde5dc1f9cdeabe8b88853d5c8e0698
        7c78a2d9054be00a19457f4bbd7b3373c27b1c0305e3008c4227571d9999c93c
        e59d2326ddfc57202833b3d01a87aa96c59f74ca721cd6928d040d685e8e5a17
        000000405f68db0593914ea18d1cd0feada759bde722cf058d435a5fb1bb6f9c
        8d67a1c665537bd22c08e2cebf01f0ecd05e10f5ac94631f519604dce2732dfd
        bd5f1a0b
        """
    static let firstVersionID = "7463188027a3923e0d378921244a569e9ddc3552f9dfa5861c1e60725098fa13"
    static let frameHex = """
        43564601000000020000020401000000100f1e2d3c4b5a49788796a5b4c3d2e1
        f0000000105e33abd457b78418a999da77bd6df0c70000000d696e7465727665
        6e74696f6e73000000010200000020c0e2f8974222231f96afaf5893b21a5b3d
        92a36cddce8d82562cb2077d9c657c0000018bcfe5687b000000000000000864
        65762d3030303100000000100f1e2d3c4b5a49788796a5b4c3d2e1f000000018
        606162636465666768696a6b6c6d6e6f707172737475767700000110cefbde53
        226b3b454635c754231160ca5b88f2587718b6466a3f5117f91a46cdc594a53d
        989d02ee3e4f85ae074c64c98d0cfbb2aa7a2285c1ed8dbeadcb8494a9eecc8b
        c8ab8a157d5f05a0a691e6a8e1caa4d1825b74377a528e6d1e6e9d88f371b4c5
        0106a53077ba2a434fde122747b043489a2308c79523aa77952e474ae945f986
        fcc3c1f2372f0e313d86ee6747583257393a9653c64f947840771a22133c67d1
        3439c218a78b409b6a9142c19ac352b742faf4df5540628f945e46d95fde5dc1
        f9cdeabe8b88853d5c8e06987c78a2d9054be00a19457f4bbd7b3373c27b1c03
        05e3008c4227571d9999c93ce59d2326ddfc57202833b3d01a87aa96c59f74ca
        721cd6928d040d685e8e5a17000000405f68db0593914ea18d1cd0feada759bd
        e722cf058d435a5fb1bb6f9c8d67a1c665537bd22c08e2cebf01f0ecd05e10f5
        ac94631f519604dce2732dfdbd5f1a0b0000020401000000100f1e2d3c4b5a49
        788796a5b4c3d2e1f0000000105e33abd457b78418a999da77bd6df0c7000000
        0d696e74657276656e74696f6e73000000010200000020c0e2f8974222231f96
        afaf5893b21a5b3d92a36cddce8d82562cb2077d9c657c0000018bcfe569c800
        000001000000086465762d3030303201000000100f1e2d3c4b5a49788796a5b4
        c3d2e1f000000018808182838485868788898a8b8c8d8e8f9091929394959697
        0000011039cc2d2097f161503e77568f2cd275b45becdcd183fbbaf9e06a6ada
        b7d21c716d4c631178ba80aab385fbba09e936322b86b01d116322b0e6d15b61
        3a72890a0d50ddc53de38a343dc7def4b7db92b4495f38d40011a8025b76e15f
        8986a7281fa6e5c4b39ed1b871cb59a1d46e41412853540c8987cd2805474fb6
        da410a09e58342c9e383ced94eef0e1493794b397ad29ea67f1f063a6fd30cb5
        0133824156e17a19c039b51955429f2143134cdb55a484662f5803f63ef169ee
        8cf8d3288a78cf0e495450e5c7fd397a57036bbea0b12d87c9fa71815b353805
        98b0dd6cde167b1ffe45604533614d118775790eea5de2e5168a562da9157514
        80fa222732053a75fa73b9638759441b709fb439000000400a7bc500b53fcd3c
        660d2fa3d73241747525b5bb03dfd9972f49a936608870bc5a387d9a33da42c8
        a0db617d6de5b4405cde2529aa86655d94e8815a7df6270800000001000000c3
        0000001d436172655661756c742d73746174652d636f6d6d69746d656e742d76
        3101000000100f1e2d3c4b5a49788796a5b4c3d2e1f0000000105e33abd457b7
        8418a999da77bd6df0c70000000d696e74657276656e74696f6e730000000000
        0000070000019b76daa80000000002000000086465762d303030310000000000
        000003000000000000000100000002000000000000000500000020faf48d2e1f
        23502311cc5fd68b003d8f879519fda32d99b3816d5adc89e0fe3c0000019b76
        daa87b00000040ff9fe688372a8e6cbb449397970ff587ec7b524eaa2b22be68
        2333838e5459dfdbd5b763950339be4ab33c2eaf33bfece5e9a8fa135da4bbdc
        bed1157d8f920a
        """
    static let pageHex = """
        43565001000000020000000000000007010000020401000000100f1e2d3c4b5a
        49788796a5b4c3d2e1f0000000105e33abd457b78418a999da77bd6df0c70000
        000d696e74657276656e74696f6e73000000010200000020c0e2f8974222231f
        96afaf5893b21a5b3d92a36cddce8d82562cb2077d9c657c0000018bcfe5687b
        00000000000000086465762d3030303100000000100f1e2d3c4b5a49788796a5
        b4c3d2e1f000000018606162636465666768696a6b6c6d6e6f70717273747576
        7700000110cefbde53226b3b454635c754231160ca5b88f2587718b6466a3f51
        17f91a46cdc594a53d989d02ee3e4f85ae074c64c98d0cfbb2aa7a2285c1ed8d
        beadcb8494a9eecc8bc8ab8a157d5f05a0a691e6a8e1caa4d1825b74377a528e
        6d1e6e9d88f371b4c50106a53077ba2a434fde122747b043489a2308c79523aa
        77952e474ae945f986fcc3c1f2372f0e313d86ee6747583257393a9653c64f94
        7840771a22133c67d13439c218a78b409b6a9142c19ac352b742faf4df554062
        8f945e46d95fde5dc1f9cdeabe8b88853d5c8e06987c78a2d9054be00a19457f
        4bbd7b3373c27b1c0305e3008c4227571d9999c93ce59d2326ddfc57202833b3
        d01a87aa96c59f74ca721cd6928d040d685e8e5a17000000405f68db0593914e
        a18d1cd0feada759bde722cf058d435a5fb1bb6f9c8d67a1c665537bd22c08e2
        cebf01f0ecd05e10f5ac94631f519604dce2732dfdbd5f1a0b00000000000000
        090001000000000000000900000001000000c30000001d436172655661756c74
        2d73746174652d636f6d6d69746d656e742d763101000000100f1e2d3c4b5a49
        788796a5b4c3d2e1f0000000105e33abd457b78418a999da77bd6df0c7000000
        0d696e74657276656e74696f6e7300000000000000070000019b76daa8000000
        0002000000086465762d30303031000000000000000300000000000000010000
        0002000000000000000500000020faf48d2e1f23502311cc5fd68b003d8f8795
        19fda32d99b3816d5adc89e0fe3c0000019b76daa87b00000040ff9fe688372a
        8e6cbb449397970ff587ec7b524eaa2b22be682333838e5459dfdbd5b7639503
        39be4ab33c2eaf33bfece5e9a8fa135da4bbdcbed1157d8f920a
        """

    /// A random well-formed envelope: non-ASCII categories and device ids, random sizes and flags.
    static func randomEnvelope<G: RandomNumberGenerator>(_ g: inout G) throws -> Envelope {
        let alphabet = ["a", "z", "0", "-", "é", "ß", "日", "🙂", "e\u{301}"]
        func text(_ max: Int) -> String {
            var s = ""
            while s.isEmpty || s.utf8.count > max {
                s = (0..<Int.random(in: 1...12, using: &g)).map { _ in alphabet.randomElement(using: &g)! }.joined()
            }
            return s
        }
        let header = RecordHeader(
            ownerID: UUID(),
            tresorID: UUID(),
            category: text(64),
            epoch: UInt32.random(in: 1...UInt32.max, using: &g),
            recordType: Bool.random(using: &g) ? .activity : .outcome,
            recordID: try RecordID(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &g) }),
            timestamp: HLCTimestamp(
                physicalMs: UInt64.random(in: 0...UInt64.max, using: &g),
                counter: UInt32.random(in: 0...UInt32.max, using: &g),
                deviceID: text(64)
            ),
            deleted: Bool.random(using: &g),
            authorID: UUID()
        )
        return Envelope(
            header: header,
            nonce: AEADNonce.random(),
            ciphertext: (0..<Int.random(in: 0...3_000, using: &g)).map { _ in UInt8.random(in: 0...255, using: &g) },
            signature: try Signature(bytes: (0..<64).map { _ in UInt8.random(in: 0...255, using: &g) })
        )
    }

    /// The offsets of a few fields in the binary of `e` (Docs/envelope-v1.md §7.1).
    struct Layout {
        let header: Int
        init(_ e: Envelope) { header = e.header.binaryCount }
        var categoryLength: Int { 41 }
        var category: Int { 45 }
        var deleted: Int { header - 21 }
        var ciphertextLength: Int { header + 28 }
    }

    static func put(_ v: UInt32, at i: Int, in b: inout [UInt8]) {
        b.replaceSubrange(i..<i + 4, with: [UInt8(v >> 24), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)])
    }

    static func malformed(_ b: [UInt8]) -> String? {
        do {
            _ = try Envelope(binary: b)
            return nil
        } catch {
            guard case let .malformed(why) = error else { return "not malformed: \(error)" }
            return why
        }
    }

    // MARK: The doc's vectors

    @Test func theFixedEnvelopeAndFrameMatchTheVectorsByteForByte() throws {
        let first = SpecVectors.first
        let second = SpecVectors.second
        #expect(try first.binary == SpecVectors.bytes(hex: Self.firstHex))
        #expect(first.versionID == Self.firstVersionID)
        let commitment = try StateCommitmentTests.vectorStatement().signed(by: SpecVectors.signing)
        let frame = try EnvelopeFrame.encode([first, second], commitments: [commitment])
        #expect(try frame == SpecVectors.bytes(hex: Self.frameHex))
        let page = try PullPageFrame.encode(changes: [(7, first.binary), (9, nil)], done: true, nextCursor: 9, commitments: [commitment])
        #expect(try page == SpecVectors.bytes(hex: Self.pageHex))
        let readPage = try PullPageFrame(bytes: try SpecVectors.bytes(hex: Self.pageHex), after: 0)
        #expect(readPage.commitments == [commitment] && readPage.done && readPage.nextCursor == 9)
        #expect(try EnvelopeFrame(bytes: try SpecVectors.bytes(hex: Self.frameHex)).commitments == [commitment])

        // Read back from the hex alone, the vectors open under the fixed keys to the fixed records.
        let decoded = try EnvelopeFrame(bytes: try SpecVectors.bytes(hex: Self.frameHex)).envelopes()
        #expect(decoded == [first, second])
        let context = EnvelopeContext(ownerID: SpecVectors.owner, tresorID: SpecVectors.tresorID, category: SpecVectors.category)
        let keys: [UInt32: SymmetricKey] = [1: SpecVectors.epochKey]
        let opened = try decoded[0].openRecord(keys: keys, authorKey: SpecVectors.signing.publicKey, expecting: context)
        guard case let .outcome(outcome)? = opened.record else {
            Issue.record("the first vector is not an outcome")
            return
        }
        #expect(outcome.activityID == "walk" && outcome.occurrence == 3)
        #expect(outcome.values.map(\.id) == ["v1"] && outcome.values.first?.value == .boolean(true))
        #expect(try decoded[0].open(keys: keys, authorKey: SpecVectors.signing.publicKey, expecting: context) == SpecVectors.outcomePayload)
        let tombstone = try decoded[1].openRecord(keys: keys, authorKey: SpecVectors.signing.publicKey, expecting: context)
        #expect(tombstone.record == nil && tombstone.header.deleted)
    }

    @Test func theDocPrintsTheSameVectors() throws {
        let doc = try SpecVectors.doc("envelope-v1.md")
        let first = Hex.encode(try SpecVectors.bytes(hex: Self.firstHex))
        let frame = Hex.encode(try SpecVectors.bytes(hex: Self.frameHex))
        #expect(SpecVectors.hexBlock(after: "Envelope 1, binary", in: doc) == first)
        #expect(SpecVectors.hexBlock(after: "Batch of envelopes 1 and 2", in: doc) == frame)
        #expect(SpecVectors.hexBlock(after: "Page after cursor 0", in: doc) == Hex.encode(try SpecVectors.bytes(hex: Self.pageHex)))
        #expect(doc.contains(Self.firstVersionID))
        #expect(doc.contains(SpecVectors.tresorID.uuidString.lowercased()))
        #expect(doc.contains(SpecVectors.recordID.hex))
    }

    @Test func versionIDAndSignedBytesAreAFixedPrefixOverTheBinary() throws {
        var g = SystemRandomNumberGenerator()
        for e in try [SpecVectors.first, SpecVectors.second] + (0..<20).map({ _ in try Self.randomEnvelope(&g) }) {
            let b = e.binary
            var prefix = CanonicalWriter(domain: "CareVault-envelope-id-v1")
            prefix.append(UInt32(25 + e.header.binaryCount))
            prefix.append("CareVault-envelope-v1")
            #expect(Hex.encode(try BLAKE2b.hash(prefix.bytes + b)) == e.versionID)
            var signed = CanonicalWriter(domain: "CareVault-envelope-sig-v1")
            signed.append(UInt32(25 + e.header.binaryCount))
            signed.append("CareVault-envelope-v1")
            #expect(signed.bytes + b.dropLast(68) == e.signedBytes)
        }
    }

    // MARK: Round trips

    @Test func randomEnvelopesRoundTripAndAgreeWithJSON() throws {
        var g = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let e = try Self.randomEnvelope(&g)
            let b = e.binary
            #expect(b.count == e.binaryCount)
            #expect(b.first == 1, "the format version is the first byte, never '{'")
            let back = try Envelope(binary: b)
            #expect(back == e)
            #expect(back.binary == b, "strings keep their bytes: no normalisation on the way")
            #expect(try RecordHeader(binaryEnvelope: b) == e.header)
            let json = try JSONDecoder().decode(Envelope.self, from: JSONEncoder().encode(e))
            #expect(json == back && json.versionID == back.versionID)
        }
    }

    @Test func theJSONAndBinaryFormsOfASealedEnvelopeOpenAlike() throws {
        let f = try EnvelopeFixture()
        let fromJSON = try JSONDecoder().decode(Envelope.self, from: JSONEncoder().encode(f.envelope))
        let fromBinary = try Envelope(binary: fromJSON.binary)
        #expect(fromBinary == fromJSON && fromBinary.versionID == f.envelope.versionID)
        #expect(try f.open(fromBinary) == f.payload)
        #expect(fromBinary.binary.count < (try JSONEncoder().encode(f.envelope)).count * 3 / 4)
    }

    @Test func everyFlippedByteFailsToDecodeOrToVerify() throws {
        let e = SpecVectors.first
        let b = e.binary
        for i in b.indices {
            var t = b
            t[i] ^= 0x01
            guard let d = try? Envelope(binary: t) else { continue }
            #expect(throws: EnvelopeError.self) { try d.verify(authorKey: SpecVectors.signing.publicKey) }
        }
    }

    // MARK: Hostile input

    @Test func truncationAtEveryLengthIsRefused() throws {
        let b = SpecVectors.first.binary
        for n in 0..<b.count {
            #expect(Self.malformed(Array(b.prefix(n)))?.contains("end") == true, "cut at \(n)")
        }
        let frame = try EnvelopeFrame.encode([SpecVectors.first, SpecVectors.second])
        for n in 0..<frame.count {
            #expect(throws: EnvelopeFrameError.self) { try EnvelopeFrame(bytes: Array(frame.prefix(n))) }
        }
        let page = try PullPageFrame.encode(changes: [(7, b), (9, nil)], done: true, nextCursor: 9)
        for n in 0..<page.count {
            #expect(throws: EnvelopeFrameError.self) { try PullPageFrame(bytes: Array(page.prefix(n)), after: 0) }
        }
    }

    @Test func lengthPrefixesPastTheEndAreRefused() throws {
        let e = SpecVectors.first
        let layout = Layout(e)
        for length in [UInt32.max, UInt32(e.ciphertext.count + 69)] {
            var b = e.binary
            Self.put(length, at: layout.ciphertextLength, in: &b)
            #expect(Self.malformed(b) == "the length of the ciphertext (\(length) bytes) points past the end")
        }
        var c = e.binary
        Self.put(.max, at: layout.categoryLength, in: &c)
        #expect(Self.malformed(c) == "the length of the category (4294967295 bytes) points past the end")
        var frame = try EnvelopeFrame.encode([e])
        Self.put(.max, at: 8, in: &frame)
        #expect(throws: EnvelopeFrameError.malformed("the length of the envelope 0 (4294967295 bytes) points past the end")) {
            try EnvelopeFrame(bytes: frame)
        }
        var count = try EnvelopeFrame.encode([e])
        Self.put(.max, at: 4, in: &count)
        #expect(throws: EnvelopeFrameError.tooLarge("it announces 4294967295 envelopes; at most 2000 are allowed")) {
            try EnvelopeFrame(bytes: count)
        }
        var page = try PullPageFrame.encode(changes: [(1, e.binary)], done: true, nextCursor: 1)
        Self.put(.max, at: 17, in: &page)
        #expect(throws: EnvelopeFrameError.self) { try PullPageFrame(bytes: page, after: 0) }
    }

    @Test func trailingBytesAreRefused() throws {
        let e = SpecVectors.first
        #expect(Self.malformed(e.binary + [0]) == "1 bytes follow the end of the envelope")
        let frame = try EnvelopeFrame.encode([e])
        #expect(throws: EnvelopeFrameError.malformed("2 bytes follow the end of the batch")) { try EnvelopeFrame(bytes: frame + [0, 0]) }
        let page = try PullPageFrame.encode(changes: [(1, e.binary)], done: true, nextCursor: 1)
        #expect(throws: EnvelopeFrameError.malformed("1 bytes follow the end of the page")) { try PullPageFrame(bytes: page + [1], after: 0) }
    }

    @Test func aBatchNamesItsOneBadEnvelope() throws {
        let good = SpecVectors.first.binary
        var bad = SpecVectors.second.binary
        Self.put(63, at: bad.count - 68, in: &bad)
        let frame = try EnvelopeFrame(bytes: EnvelopeFrame.encode(binaries: [good, good, bad, good]))
        #expect(frame.count == 4)
        #expect(throws: EnvelopeFrameError.badEnvelope(index: 2, reason: .malformed("the signature is 63 bytes, not 64"))) {
            try frame.envelopes()
        }
        #expect(try frame.envelope(at: 3) == SpecVectors.first)
        #expect(try frame.header(at: 2) == SpecVectors.second.header, "the header before the bad field still reads")
        #expect(Array(frame.envelopeBytes(at: 2)) == bad)
        let message = EnvelopeFrameError.badEnvelope(index: 2, reason: .malformed("the deleted flag is 2, not 0 or 1")).description
        #expect(message == "envelope 2 of the batch (counting from 0): envelope is malformed: the deleted flag is 2, not 0 or 1")
    }

    @Test func countsOfZeroAndPastTheLimit() throws {
        let empty = try EnvelopeFrame.encode([])
        #expect(empty == EnvelopeFrame.magic + [0, 0, 0, 0, 0, 0, 0, 0])
        #expect(try EnvelopeFrame(bytes: empty).envelopes().isEmpty)
        let emptyPage = try PullPageFrame(bytes: PullPageFrame.encode(changes: [], done: true, nextCursor: 5), after: 5)
        #expect(emptyPage.changes.isEmpty && emptyPage.done && emptyPage.nextCursor == 5)

        let b = SpecVectors.first.binary
        #expect(throws: EnvelopeFrameError.tooLarge("2001 envelopes; at most 2000 are allowed")) {
            try EnvelopeFrame.encode(binaries: Array(repeating: b, count: 2_001))
        }
        let full = try EnvelopeFrame.encode(binaries: Array(repeating: b, count: 2_000))
        #expect(try EnvelopeFrame(bytes: full).count == 2_000)
        var over = Array(full.prefix(full.count - 4)) + [0, 0, 0, 0] + b + [0, 0, 0, 0]
        Self.put(UInt32(b.count), at: full.count - 4, in: &over)
        Self.put(2_001, at: 4, in: &over)
        #expect(throws: EnvelopeFrameError.tooLarge("it announces 2001 envelopes; at most 2000 are allowed")) { try EnvelopeFrame(bytes: over) }
        #expect(throws: EnvelopeFrameError.self) { try EnvelopeFrame(bytes: full, maxCount: 10) }
        // A count the body cannot hold, and bodies past the byte limit, are refused before any work.
        var short = try EnvelopeFrame.encode([SpecVectors.first, SpecVectors.second])
        Self.put(3, at: 4, in: &short)
        #expect(throws: EnvelopeFrameError.malformed("it ends after its 3 envelopes, without the count of state commitments")) {
            try EnvelopeFrame(bytes: short)
        }
        #expect(throws: EnvelopeFrameError.self) {
            try EnvelopeFrame(bytes: EnvelopeFrame.magic + [UInt8](repeating: 0, count: EnvelopeFrame.maxBytes))
        }
        let pages = (1...5_001).map { (sequence: UInt64($0), envelope: [UInt8]?.none) }
        #expect(throws: EnvelopeFrameError.self) { try PullPageFrame.encode(changes: pages, done: true, nextCursor: 0) }
    }

    @Test func invalidUTF8AndBadFlagsAndUnknownCodesAreRefused() throws {
        let e = SpecVectors.first
        let layout = Layout(e)
        for junk: [UInt8] in [[0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80]] {
            var b = e.binary
            b.replaceSubrange(layout.category..<layout.category + junk.count, with: junk)
            #expect(Self.malformed(b) == "the category is not valid UTF-8")
            var d = e.binary
            let device = layout.deleted - 8
            d.replaceSubrange(device..<device + junk.count, with: junk)
            #expect(Self.malformed(d) == "the device id is not valid UTF-8")
        }
        var flag = e.binary
        flag[layout.deleted] = 2
        #expect(Self.malformed(flag) == "the deleted flag is 2, not 0 or 1")
        var type = e.binary
        type[layout.category + 13 + 4] = 3
        #expect(Self.malformed(type) == "record type 3")
        var version = e.binary
        version[0] = 2
        #expect(throws: EnvelopeError.unsupportedVersion(2)) { try Envelope(binary: version) }
        #expect(Self.malformed(Array(#"{"header":{}}"#.utf8)) == "the bytes are JSON, not the binary encoding")
        var shortUUID = e.binary
        Self.put(15, at: 1, in: &shortUUID)
        shortUUID.remove(at: 5)
        #expect(Self.malformed(shortUUID) == "the owner id is 15 bytes, not 16")
        var shortNonce = e.binary
        Self.put(23, at: layout.header, in: &shortNonce)
        shortNonce.remove(at: layout.header + 4)
        #expect(Self.malformed(shortNonce) == "the nonce is 23 bytes, not 24")

        let page = try PullPageFrame.encode(changes: [(1, nil)], done: true, nextCursor: 1)
        for (i, v) in [(16, UInt8(2)), (17, 2)] {
            var p = page
            p[i] = v
            #expect(throws: EnvelopeFrameError.self) { try PullPageFrame(bytes: p, after: 0) }
        }
        #expect(throws: EnvelopeFrameError.malformed("it does not start with the marker of a batch of envelopes (it looks like JSON)")) {
            try EnvelopeFrame(bytes: Array(#"{"envelopes":[]}"#.utf8))
        }
        #expect(throws: EnvelopeFrameError.self) { try EnvelopeFrame(bytes: page) }
    }

    // MARK: Pull pages

    @Test func aPageQuarantinesOneBadEnvelopeAndKeepsTheRest() throws {
        var bad = SpecVectors.second.binary
        bad[Layout(SpecVectors.second).ciphertextLength + 3] &+= 1  // the ciphertext's length no longer fits
        let page = try PullPageFrame(
            bytes: PullPageFrame.encode(
                changes: [(3, SpecVectors.first.binary), (4, bad), (8, nil), (9, Array("not an envelope".utf8))],
                done: false,
                nextCursor: 9
            ),
            after: 2
        )
        #expect(page.changes.map(\.sequence) == [3, 4, 8, 9] && !page.done && page.nextCursor == 9)
        #expect(try page.envelope(of: page.changes[0]) == SpecVectors.first)
        #expect(throws: EnvelopeError.self) { try page.envelope(of: page.changes[1]) }
        #expect(page.recordID(of: page.changes[1]) == SpecVectors.recordID, "the header of a broken envelope still names its record")
        #expect(throws: EnvelopeError.malformed("the server sent no envelope for this change")) { try page.envelope(of: page.changes[2]) }
        #expect(page.recordID(of: page.changes[2]) == nil && page.envelopeBytes(of: page.changes[2]) == nil)
        #expect(throws: EnvelopeError.self) { try page.envelope(of: page.changes[3]) }
        #expect(page.recordID(of: page.changes[3]) == nil)
        #expect(page.envelopeBytes(of: page.changes[1]).map(Array.init) == bad)
    }

    @Test func aPageOutOfOrderOrBehindTheCursorIsRefusedWhole() throws {
        let b = SpecVectors.first.binary
        let orders: [[UInt64]] = [[5, 4], [5, 5], [2, 6]]
        for sequences in orders {
            let bytes = try PullPageFrame.encode(changes: sequences.map { ($0, b) }, done: true, nextCursor: 9)
            #expect(throws: EnvelopeFrameError.self) { try PullPageFrame(bytes: bytes, after: 2) }
        }
        let behind = try PullPageFrame.encode(changes: [(5, b)], done: true, nextCursor: 1)
        #expect(throws: EnvelopeFrameError.malformed("its next cursor 1 lies before the cursor 2 it was asked after")) {
            try PullPageFrame(bytes: behind, after: 2)
        }
    }
}
