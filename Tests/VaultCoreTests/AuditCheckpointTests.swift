import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// The audit checkpoint statement and the entry hash, pinned byte for byte to the vectors in
/// Docs/envelope-v1.md §3.1, and the chain walk that checks a log against checkpoints.
@Suite("Audit checkpoints")
struct AuditCheckpointTests {
    struct Entry: AuditChainEntry {
        var sequence: UInt64
        var at: UnixMillis
        var actor: String
        var action: String
        var patientID: UUID?
        var details: [String: String]
        var previousHash: String
    }

    static let headHash = Hex.encode(Array(UInt8(0)...UInt8(31)))

    @Test func statementBytesAreTheDocumentedVector() throws {
        let admin = try SigningKeyPair(seed: SecureBytes(copying: [UInt8](repeating: 7, count: 32)))
        let c = AuditCheckpoint.sign(sequence: 42, headHash: Self.headHash, signedAt: 1_767_225_600_000, adminKey: admin)
        let vector =
            "0000001d436172655661756c742d61756469742d636865636b706f696e742d7631" + "01" + "000000000000002a"
            + "00000020000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" + "0000019b76daa800"
        #expect(Hex.encode(c.statementBytes) == vector)
        #expect(admin.publicKey.isValidSignature(c.signature, for: try Hex.decode(vector)))
        try c.verify(adminKey: admin.publicKey)
    }

    @Test func entryHashIsTheDocumentedVector() throws {
        let entry = Entry(
            sequence: 3,
            at: 1_767_225_600_123,
            actor: "admin",
            action: "share.approved",
            patientID: UUID(uuidString: "0F8FAD5B-D9CB-469F-A165-70867728950E"),
            details: ["share": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "category": "interventions"],
            previousHash: String(repeating: "ab", count: 32)
        )
        #expect(AuditChain.hash(of: entry) == "361f76906c1b5c24d08d899e340b1fa9d09b697562310733d7bef1ad3e439d5f")
    }

    struct EntryV2: AuditChainEntry {
        var base: Entry
        var patientLink: String?
        var entryFormat: UInt8 { 2 }
        var sequence: UInt64 { base.sequence }
        var at: UnixMillis { base.at }
        var actor: String { base.actor }
        var action: String { base.action }
        var patientID: UUID? { base.patientID }
        var details: [String: String] { base.details }
        var previousHash: String { base.previousHash }
    }

    struct EntryOfFormat: AuditChainEntry {
        var base: Entry
        var entryFormat: UInt8
        var sequence: UInt64 { base.sequence }
        var at: UnixMillis { base.at }
        var actor: String { base.actor }
        var action: String { base.action }
        var patientID: UUID? { base.patientID }
        var details: [String: String] { base.details }
        var previousHash: String { base.previousHash }
    }

    /// Only formats 1 and 2 have a hash: for any other, none, so that no stored hash (such as a fixed text
    /// once returned for them) can match whatever the entry holds.
    @Test(arguments: [UInt8(0), 3, 255])
    func anEntryOfAnUnknownFormatHasNoHash(format: UInt8) {
        let base = Entry(sequence: 1, at: 1, actor: "a", action: "login", patientID: nil, details: [:], previousHash: AuditChain.genesis)
        #expect(AuditChain.hash(of: EntryOfFormat(base: base, entryFormat: format)) == nil)
        #expect(AuditChain.hash(of: EntryOfFormat(base: base, entryFormat: 1)) == AuditChain.hash(of: base))
        #expect(AuditChain.hash(of: EntryOfFormat(base: base, entryFormat: 2)) != nil)
    }

    /// Format 2 (Docs/envelope-v1.md §3.1): the genesis, digest and hash, and the hashed bytes as the doc lists them.
    @Test func formatTwoEntryHashIsTheDocumentedVector() throws {
        let patient = try #require(UUID(uuidString: "0F8FAD5B-D9CB-469F-A165-70867728950E"))
        let base = Entry(
            sequence: 3,
            at: 1_767_225_600_123,
            actor: "admin",
            action: "share.approved",
            patientID: patient,
            details: ["share": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "category": "interventions"],
            previousHash: String(repeating: "ab", count: 32)
        )
        let genesis = AuditChain.patientLink(key: Array(0...31), previous: nil)
        let entry = EntryV2(base: base, patientLink: genesis)
        let digest = AuditChain.digest(of: entry)
        let hash = try #require(AuditChain.hash(of: entry))
        #expect(genesis == "5af25185d3a92b0c24940a9beb891bff20d3603510825d1943607bb454791f58")
        #expect(digest == "d7391b15252f689a1d8e1fa85aeed270493ae6f58e62bbe2906e6b58b58d06a1")
        #expect(hash == "1171ed8c15f6ee0fc9802f0754d3beb1e957e625e7582c0f41f253456bd5ed17")
        #expect(AuditChain.linkHash(sequence: 3, digest: digest, patientLink: genesis, previousHash: base.previousHash) == hash)
        #expect(hash != AuditChain.hash(of: base), "a format-1 reading of the same fields differs")

        var w = CanonicalWriter(domain: "CareVault-audit-v2")
        w.append(UInt64(3))
        w.append(digest)
        w.append(genesis as String?)
        w.append(base.previousHash)
        #expect(Hex.encode(try BLAKE2b.hash(w.bytes)) == hash)
        let doc = try SpecVectors.doc("envelope-v1.md")
        let section = try #require(doc.components(separatedBy: "the hashed bytes are").dropFirst().first)
        let block = section.components(separatedBy: "```")[1]
        let listed = block.split(whereSeparator: \.isWhitespace).filter { $0.allSatisfy(\.isHexDigit) }.joined()
        #expect(listed == Hex.encode(w.bytes))
        #expect(doc.contains(genesis) && doc.contains(digest) && doc.contains(hash))
    }

    @Test func aCheckpointWithAnyFieldChangedOrAnotherKeyDoesNotVerify() throws {
        let admin = SigningKeyPair.generate()
        let c = AuditCheckpoint.sign(sequence: 5, headHash: Self.headHash, signedAt: 1, adminKey: admin)
        try c.verify(adminKey: admin.publicKey)
        var changed = [c, c, c, c, c]
        changed[0].sequence = 6
        changed[1].headHash = String(Self.headHash.dropLast()) + "0"
        changed[2].signedAt = 2
        changed[3].headHash = Self.headHash.uppercased()
        changed[4].version = 2
        for bad in changed { #expect(throws: TrustError.self) { try bad.verify(adminKey: admin.publicKey) } }
        #expect(throws: TrustError.invalidSignature(what: "audit checkpoint")) { try c.verify(adminKey: SigningKeyPair.generate().publicKey) }
        let zero = AuditCheckpoint.sign(sequence: 0, headHash: Self.headHash, signedAt: 1, adminKey: admin)
        #expect(throws: TrustError.self) { try zero.verify(adminKey: admin.publicKey) }
    }

    /// A chain of `n` hashes: sequence, previous hash, hash.
    static func chain(_ n: UInt64) -> [(UInt64, String, String)] {
        var previous = AuditChain.genesis
        return (1...n).map { i in
            let hash = Hex.encode(try! BLAKE2b.hash(Array("\(i)".utf8)))
            defer { previous = hash }
            return (i, previous, hash)
        }
    }

    static func walk(
        _ links: [(UInt64, String, String)],
        _ checkpoints: [AuditCheckpoint],
        key: SigningPublicKey,
        remembered: AuditCheckpoint? = nil
    )
        throws(AuditChainBreak) -> AuditChainCheck
    {
        var check = try AuditChainCheck(checkpoints: checkpoints, adminKey: key, remembered: remembered)
        for (s, p, h) in links { try check.append(sequence: s, previousHash: p, hash: h) }
        try check.finish()
        return check
    }

    static func breakOf(_ body: () throws -> AuditChainCheck) -> AuditChainBreak? {
        do {
            _ = try body()
            return nil
        } catch { return error as? AuditChainBreak }
    }

    @Test func theWalkNamesTheFirstBrokenSequenceAndWhy() throws {
        let admin = SigningKeyPair.generate()
        let links = Self.chain(6)
        let at3 = AuditCheckpoint.sign(sequence: 3, headHash: links[2].2, signedAt: 1, adminKey: admin)
        let at5 = AuditCheckpoint.sign(sequence: 5, headHash: links[4].2, signedAt: 2, adminKey: admin)
        let intact = try Self.walk(links, [at3, at5], key: admin.publicKey)
        #expect(intact.newestMatched == at5 && intact.last == 6)

        var gap = links
        gap.remove(at: 3)
        #expect(Self.breakOf { try Self.walk(gap, [], key: admin.publicKey) }?.reason == .missingEntry)
        #expect(Self.breakOf { try Self.walk(gap, [], key: admin.publicKey) }?.sequence == 4)
        var relinked = links
        relinked[4].1 = AuditChain.genesis
        #expect(
            Self.breakOf { try Self.walk(relinked, [], key: admin.publicKey) }
                == AuditChainBreak(
                    sequence: 5,
                    reason: .brokenLink,
                    detail: "its previous hash is not the hash of entry 4"
                )
        )
        // Entry 4 removed and everything after renumbered and rehashed: consistent on its own, caught at 5.
        var rewritten = Self.chain(5)
        rewritten[3].2 = Hex.encode(try BLAKE2b.hash(Array("x".utf8)))
        rewritten[4].1 = rewritten[3].2
        rewritten[4].2 = Hex.encode(try BLAKE2b.hash(Array("y".utf8)))
        let mismatch = Self.breakOf { try Self.walk(rewritten, [at3, at5], key: admin.publicKey) }
        #expect(mismatch?.sequence == 5 && mismatch?.reason == .checkpointMismatch)
        #expect(mismatch?.detail.contains("from 4 to 5") == true)
        // A log cut short before a checkpoint.
        let short = Self.breakOf { try Self.walk(Array(links.prefix(4)), [at3, at5], key: admin.publicKey) }
        #expect(short?.sequence == 5 && short?.reason == .checkpointMismatch)
        // A checkpoint this device remembers, gone from the server's list.
        let dropped = Self.breakOf { try Self.walk(links, [at3], key: admin.publicKey, remembered: at5) }
        #expect(dropped?.sequence == 5 && dropped?.reason == .checkpointMissing)
        // A checkpoint signed by another key.
        let forged = AuditCheckpoint.sign(sequence: 3, headHash: links[2].2, signedAt: 1, adminKey: .generate())
        #expect(Self.breakOf { try Self.walk(links, [forged], key: admin.publicKey) }?.reason == .forgedCheckpoint)
    }

    /// A walk resumed after a link a walk from 1 reached (not a checkpoint) checks what follows as a walk from
    /// 1 does; a checkpoint at that link must name its hash, and the newest one up to it counts as reached.
    @Test func aWalkResumedAfterALinkChecksWhatFollows() throws {
        let admin = SigningKeyPair.generate()
        let links = Self.chain(6)
        let at2 = AuditCheckpoint.sign(sequence: 2, headHash: links[1].2, signedAt: 1, adminKey: admin)
        let at5 = AuditCheckpoint.sign(sequence: 5, headHash: links[4].2, signedAt: 2, adminKey: admin)
        func resumed(
            _ tail: ArraySlice<(UInt64, String, String)>,
            after: UInt64,
            hash: String,
            _ checkpoints: [AuditCheckpoint]
        )
            throws(AuditChainBreak) -> AuditChainCheck
        {
            var check = try AuditChainCheck(checkpoints: checkpoints, adminKey: admin.publicKey, remembered: nil, resumingAfter: after, hash: hash)
            for (s, p, h) in tail { try check.append(sequence: s, previousHash: p, hash: h) }
            try check.finish()
            return check
        }
        let start = try AuditChainCheck(checkpoints: [at2], adminKey: admin.publicKey, remembered: nil, resumingAfter: 3, hash: links[2].2)
        #expect(start.newestMatched == at2 && start.last == 3 && start.head == links[2].2)
        let intact = try resumed(links[3...], after: 3, hash: links[2].2, [at2, at5])
        #expect(intact.newestMatched == at5 && intact.last == 6)
        // The first link after the point must continue the hash walked to.
        let other = Self.breakOf { try resumed(links[3...], after: 3, hash: AuditChain.genesis, []) }
        #expect(other?.sequence == 4 && other?.reason == .brokenLink)
        // A checkpoint at the point that names another hash.
        let at3 = AuditCheckpoint.sign(sequence: 3, headHash: AuditChain.genesis, signedAt: 3, adminKey: admin)
        #expect(Self.breakOf { try resumed(links[3...], after: 3, hash: links[2].2, [at3]) }?.reason == .checkpointMismatch)
        // A later checkpoint the links after the point do not reach.
        #expect(Self.breakOf { try resumed(links[3..<4], after: 3, hash: links[2].2, [at5]) }?.sequence == 5)
    }
}
