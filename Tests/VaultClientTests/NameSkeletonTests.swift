import Foundation
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultTestSupport

/// Names made to pass for a certified one: the admin's review says so (Docs/design.md §2, "Look-alike names").
@Suite("Client: look-alike names in the admin's review")
struct NameSkeletonTests {
    @Test func lookAlikesShareASkeletonAndDistinctNamesDoNot() {
        let bob = NameSkeleton.of("drbob")
        for name in ["drb0b", "dr.bob", "dr-b0b", "dr_bob", "DRBOB", "drbоb", "ԁrbob", "ｄｒｂｏｂ", "drbòb", "dr8ob"] {
            #expect(NameSkeleton.of(name) == bob, "\(name)")
        }
        #expect(NameSkeleton.of("alice") == NameSkeleton.of("a1ice"))
        #expect(NameSkeleton.of("alice") == NameSkeleton.of("alıce"))
        #expect(NameSkeleton.of("modern") == NameSkeleton.of("rnodern"))
        // Separators go before the run-together rules: a dot inside "rn" does not hide it.
        #expect(NameSkeleton.of("bemard") == NameSkeleton.of("ber.nard"))
        #expect(NameSkeleton.of("wendy") == NameSkeleton.of("v-vendy"))
        #expect(NameSkeleton.of("dana") == NameSkeleton.of("clana"))
        for name in ["drbobby", "drrob", "dr.bo", "bobdr"] { #expect(NameSkeleton.of(name) != bob, "\(name)") }
    }

    @Test func aNewNameThatLooksLikeACertifiedOneIsFlaggedInTheReview() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-skeleton-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let ledger = try CertificateLedger(url: folder.appendingPathComponent("issued-certificates.json"))
        let admin = SigningKeyPair.generate()
        let bob = try await CertificateLedgerTests.forged("drbob").request
        try await ledger.admit(
            try Certificate.issue(
                userID: bob.userID,
                username: bob.username,
                role: .doctor,
                signingKey: bob.signingKey,
                boxKey: bob.boxKey,
                issuedAt: 1,
                adminKey: admin
            )
        )
        let note = await ledger.firstCertificateNote(username: "drb0b")
        #expect(note.hasPrefix("WARNING") && note.contains("'drbob'") && note.contains(bob.userID.uuidString.lowercased()), "\(note)")
        #expect(await ledger.lookalikes(of: "dr_b0b").map(\.username) == ["drbob"])
        #expect(await ledger.lookalikes(of: "drbob").isEmpty, "the same name is not a look-alike of itself")
        #expect(await ledger.firstCertificateNote(username: "carol") == "first certificate for this name and id")
    }
}
