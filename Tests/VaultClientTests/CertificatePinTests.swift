import Foundation
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultTestSupport

/// A doctor's certificate is pinned on first use: a second key certified under the same name (a tricked or
/// compromised admin, a server that slipped one past review) is refused until a person confirms it.
@Suite("Client: doctors pinned on first use")
struct CertificatePinTests {
    @Test(arguments: Backend.allCases)
    func aSubstitutedKeyForAPinnedDoctorIsRefusedUntilAPersonConfirmsIt(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            #expect(try await world.repository.shares(patientID: vault.account.profile.userID).count == 1)

            // The directory now serves "doc" with other keys, in a certificate the real admin key signed.
            let stored = try #require(try await world.repository.user(username: "doc")?.certificate)
            let substitute = Identity.generate(userID: stored.userID)
            let certified = try Certificate.issue(
                userID: stored.userID,
                username: "doc",
                role: .doctor,
                signingKey: substitute.signing.publicKey,
                boxKey: substitute.box.publicKey,
                issuedAt: stored.issuedAt + 1,
                adminKey: world.admin
            )
            try await world.repository.databaseOperator.setCertificate(of: "doc", certified)

            // Sharing another category with "doc" is refused with both fingerprints, and nothing is submitted.
            do {
                _ = try await vault.grant(doctor: "doc", category: "assessments")
                Issue.record("a substituted key was accepted")
            } catch let ClientError.integrity(message) {
                #expect(message.contains(stored.fingerprint) && message.contains(certified.fingerprint))
            }
            #expect(try await world.repository.shares(patientID: vault.account.profile.userID).count == 1)

            // A confirmation naming another fingerprint changes nothing; the right one re-pins.
            await #expect(throws: ClientError.self) {
                _ = try await vault.confirmCertificateChange(username: "doc", fingerprint: stored.fingerprint)
            }
            _ = try await vault.confirmCertificateChange(username: "doc", fingerprint: certified.fingerprint)
            _ = try await vault.grant(doctor: "doc", category: "assessments")
            #expect(try await world.repository.shares(patientID: vault.account.profile.userID).count == 2)
        }
    }
}
