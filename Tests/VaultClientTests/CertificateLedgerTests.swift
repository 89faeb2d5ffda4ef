import Foundation
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultTestSupport

/// The admin's ledger of issued certificates against a server that presents a second identity under a
/// known name or id (Docs/design.md §2).
@Suite("Client: the admin's certificate ledger")
struct CertificateLedgerTests {
    /// A registration the server could invent: fresh keys under `username` (and `userID`, when given).
    static func forged(_ username: String, role: Role = .doctor, userID: UUID? = nil) async throws -> PendingRegistration {
        let identity = Identity.generate(userID: userID ?? UUID())
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: "hostile-server", salt: salt, parameters: .interactive)
        let request = try RegistrationRequest.make(
            identity: identity,
            username: username,
            role: role,
            passwordKeys: keys,
            kdf: .interactive,
            salt: salt,
            requestedAt: Date().unixMillis
        )
        return PendingRegistration(request: request, receivedAt: Date().unixMillis)
    }

    @Test(arguments: Backend.allCases)
    func aSecondCertificateForAKnownNameOrIdIsRefusedBeforeItIsSigned(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let ledgerURL = world.root.appendingPathComponent("admin/issued-certificates.json")
            let admin = try AdminClient(baseURL: world.baseURL, key: world.admin, ledger: try CertificateLedger(url: ledgerURL))
            let device = try world.device("d")
            _ = try await device.accounts.register(username: "drbob", password: "doctor-password", role: .doctor)
            let pending = try await admin.pending()
            let genuine = try #require(pending.registrations.first)
            try await admin.approve(genuine, sequence: pending.nextSequence)
            #expect(await admin.ledger?.entry(username: "drbob")?.fingerprint == AdminClient.fingerprint(genuine.request))

            // The server presents another "drbob" (its own keys), then the real id with new keys.
            for fake in [try await Self.forged("drbob"), try await Self.forged("drbob2", userID: genuine.request.userID)] {
                await #expect(throws: ClientError.self) { try await admin.approve(fake, sequence: pending.nextSequence + 1) }
            }
            // Nothing more was certified: the server saw no second approval, the ledger holds one entry.
            #expect(try await admin.users().users.map(\.username) == ["drbob"])
            #expect(await admin.ledger?.all().count == 1)
            // A fresh process reads the same ledger from disk (mode 0600) and still refuses.
            let reopened = try CertificateLedger(url: ledgerURL)
            #expect(await reopened.entry(username: "drbob")?.userID == genuine.request.userID)
            #expect(SecureFiles.permissions(ledgerURL) == 0o600)
            let again = try AdminClient(baseURL: world.baseURL, key: world.admin, ledger: reopened)
            await #expect(throws: ClientError.self) { try await again.approve(try await Self.forged("drbob"), sequence: 99) }
        }
    }

    @Test func theSameIdentityMayBeAdmittedAgainAndAnUnreadableLedgerIsAnError() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-ledger-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        let url = folder.appendingPathComponent("issued-certificates.json")
        let ledger = try CertificateLedger(url: url)
        let admin = SigningKeyPair.generate()
        let bob = Identity.generate()
        let cert = try Certificate.issue(
            userID: bob.userID,
            username: "drbob",
            role: .doctor,
            signingKey: bob.signing.publicKey,
            boxKey: bob.box.publicKey,
            issuedAt: 1,
            adminKey: admin
        )
        try await ledger.admit(cert)
        try await ledger.admit(cert)
        #expect(await ledger.all().count == 1)
        // Same name and keys, another role: refused.
        let asPatient = try Certificate.issue(
            userID: bob.userID,
            username: "drbob",
            role: .patient,
            signingKey: bob.signing.publicKey,
            boxKey: bob.box.publicKey,
            issuedAt: 2,
            adminKey: admin
        )
        await #expect(throws: ClientError.self) { try await ledger.admit(asPatient) }

        try Data("not json".utf8).write(to: url)
        #expect(throws: ClientError.self) { try CertificateLedger(url: url) }
    }
}
