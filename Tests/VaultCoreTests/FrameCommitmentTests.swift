import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// State commitments inside a push batch and a pull page (Docs/envelope-v1.md §3.4, §7.2, §7.3): they
/// round-trip byte for byte and verify, and every bent statement, count or placement is refused whole.
@Suite("Core: commitments in binary frames")
struct FrameCommitmentTests {
    static func signed() throws -> StateCommitment {
        try StateCommitmentTests.vectorStatement().signed(by: SpecVectors.signing)
    }

    /// The bytes of a batch holding only `commitment`'s binary form, as given.
    static func batch(commitment bytes: [UInt8]) -> [UInt8] {
        EnvelopeFrame.magic + [0, 0, 0, 0] + [0, 0, 0, 1] + bytes
    }

    @Test func aCommitmentRoundTripsAndStillVerifies() throws {
        let c = try Self.signed()
        #expect(c.binary.count == 267 && c.binaryCount == 267)
        let back = try StateCommitment(binary: c.binary)
        #expect(back == c)
        #expect(back.statementBytes == c.statementBytes)
        #expect(SpecVectors.signing.publicKey.isValidSignature(back.signature, for: back.statementBytes))
        let frame = try EnvelopeFrame(bytes: Self.batch(commitment: c.binary))
        #expect(frame.count == 0 && frame.commitments == [c], "a batch of commitments only is valid")
    }

    @Test func aBentStatementIsRefusedAsMalformed() throws {
        let good = try Self.signed().binary
        // Statement layout: u32 length, then `string label` (4 + 29 bytes), then the version byte.
        var label = good
        label[10] ^= 0x20
        var version = good
        version[4 + 33] = 2
        var digest = good
        let digestLength = 4 + 195 - 8 - 32 - 4
        digest[digestLength + 3] = 31
        var signature = good
        signature[4 + 195 + 3] = 63
        for (what, bytes) in [("label", label), ("version", version), ("digest", digest), ("signature", signature)] {
            #expect(throws: EnvelopeError.self, "\(what)") { try StateCommitment(binary: bytes) }
            #expect(throws: EnvelopeFrameError.self, "\(what)") { try EnvelopeFrame(bytes: Self.batch(commitment: bytes)) }
        }
        // A byte more inside the statement (its length grown to hold it) is trailing, never ignored.
        var longer = Array(good[4..<199]) + [0]
        longer = [0, 0, 0, 196] + longer + Array(good[199...])
        #expect(throws: EnvelopeError.malformed("1 bytes follow the end of the state commitment statement")) {
            try StateCommitment(binary: longer)
        }
        #expect(throws: EnvelopeFrameError.malformed("state commitment 0: 1 bytes follow the end of the state commitment statement")) {
            try EnvelopeFrame(bytes: Self.batch(commitment: longer))
        }
        for n in 0..<good.count {
            #expect(throws: EnvelopeFrameError.self, "cut at \(n)") { try EnvelopeFrame(bytes: Self.batch(commitment: Array(good.prefix(n)))) }
        }
    }

    @Test func countsPastTheBodyOrTheLimitAreRefusedBeforeAnyWork() throws {
        var many = EnvelopeFrame.magic + [0, 0, 0, 0] + [0, 0, 0x07, 0xd1]
        #expect(throws: EnvelopeFrameError.tooLarge("it announces 2001 state commitments; at most 2000 are allowed")) {
            try EnvelopeFrame(bytes: many)
        }
        many[10] = 0
        many[11] = 5
        #expect(throws: EnvelopeFrameError.malformed("it announces 5 state commitments but holds only 0 more bytes")) {
            try EnvelopeFrame(bytes: many)
        }
        let c = try Self.signed()
        #expect(throws: EnvelopeFrameError.self) {
            try EnvelopeFrame.encode([], commitments: Array(repeating: c, count: 2_001))
        }
    }

    @Test func onlyAFinalPageCarriesCommitments() throws {
        let c = try Self.signed()
        let final = try PullPageFrame.encode(changes: [(3, nil)], done: true, nextCursor: 3, commitments: [c])
        #expect(try PullPageFrame(bytes: final, after: 0).commitments == [c])
        // A writer leaves them off a page that is not the last; a page that carries them anyway is refused.
        let partial = try PullPageFrame.encode(changes: [(3, nil)], done: false, nextCursor: 3, commitments: [c])
        #expect(try PullPageFrame(bytes: partial, after: 0).commitments.isEmpty)
        var forged = final
        forged[4 + 4 + 9] = 0
        #expect(throws: EnvelopeFrameError.malformed("it carries state commitments but is not the final page")) {
            try PullPageFrame(bytes: forged, after: 0)
        }
    }

    @Test func thePiecesOfAPageAreTheWholePage() throws {
        let e = SpecVectors.first.binary
        let c = try Self.signed()
        let whole = try PullPageFrame.encode(changes: [(1, e), (4, nil)], done: true, nextCursor: 4, commitments: [c])
        var pieces = PullPageFrame.head(count: 2)
        PullPageFrame.appendChange(sequence: 1, envelope: e, to: &pieces)
        PullPageFrame.appendChange(sequence: 4, envelope: nil, to: &pieces)
        pieces += PullPageFrame.tail(done: true, nextCursor: 4, commitments: [c])
        #expect(pieces == whole)
        #expect(PullPageFrame.changeCount(envelopeBytes: e.count) + PullPageFrame.changeCount(envelopeBytes: nil) == 9 + 4 + e.count + 9)
    }
}
