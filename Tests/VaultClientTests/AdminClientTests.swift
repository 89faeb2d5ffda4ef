import Foundation
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultTestSupport

/// The admin's SDK against a live server: what it signs, and what it refuses to sign
/// (Docs/design.md §2 accounts and trust, §3 sharing lifecycle).
@Suite("Client: the admin's SDK")
struct AdminClientTests {
    static let password = "patient-password"

    /// The audit actions the admin has caused so far.
    static func adminActions(_ admin: AdminClient) async throws -> [String] {
        try await admin.auditLog(limit: 1_000).entries.filter { $0.actor == "admin" }.map(\.action)
    }

    @Test(arguments: Backend.allCases)
    func approvingARegistrationIssuesACertificateTheClientTrusts(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let device = try world.device("p")
            _ = try await device.accounts.register(username: "pat", password: Self.password, role: .patient)
            let admin = try world.adminClient
            let pending = try await admin.pending()
            let registration = try #require(pending.registrations.first)
            #expect(pending.items == [.registration(registration)])
            #expect(PendingItem.registration(registration).isNamed(by: "PAT"))

            let user = try await admin.approve(registration, sequence: pending.nextSequence)
            #expect(user.status == .active)
            #expect(user.fingerprint == AdminClient.fingerprint(registration.request))
            // Logging in checks the certificate against the pinned admin key.
            let account = try await device.accounts.login(username: "pat", password: Self.password)
            #expect(account.certificate.fingerprint == AdminClient.fingerprint(registration.request))
            #expect(try await admin.pending().items.isEmpty)
            #expect(try await admin.users().users.map(\.username) == ["pat"])
            #expect(try await Self.adminActions(admin) == ["account.approved"])
            #expect(try await admin.verifyAudit().ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func approvingAShareLetsTheDoctorRead(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            let admin = try world.adminClient
            let pending = try await admin.pending()
            let share = try #require(pending.shares.first)
            #expect(pending.registrations.isEmpty)

            let approved = try await admin.approve(share, sequence: pending.nextSequence)
            #expect(approved.state == .active)
            #expect(try await doctor.patients().patients.map(\.username) == ["pat"])
            #expect(try await vault.shares().map(\.state) == [.active])
        }
    }

    @Test(arguments: Backend.allCases)
    func rejectingByUsernameOrShareIDEndsThePendingItem(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            let share = try await vault.grant(doctor: "doc", category: "interventions")
            let stranger = try world.device("s")
            _ = try await stranger.accounts.register(username: "stranger", password: Self.password, role: .patient)
            let admin = try world.adminClient

            try await admin.reject(id: "Stranger", reason: "unknown person")
            try await admin.reject(id: share.shareID.uuidString.uppercased(), reason: "not this doctor")
            #expect(try await admin.pending().items.isEmpty)
            #expect(try await vault.shares().map(\.state) == [.rejected])
            await #expect(throws: ClientError.self) { _ = try await stranger.accounts.login(username: "stranger", password: Self.password) }
            await #expect(throws: ClientError.notFound("nothing pending with id or username 'nobody'")) {
                try await admin.reject(id: "nobody", reason: "no one")
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func aTamperedRegistrationIsRefusedBeforeAnythingIsSigned(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            _ = try await world.device("p").accounts.register(username: "pat", password: Self.password, role: .patient)
            let admin = try world.adminClient
            let pending = try await admin.pending()
            // The server (or whoever controls it) promotes the patient to a doctor.
            var promoted = try #require(pending.registrations.first)
            promoted.request.role = .doctor
            do {
                try await admin.approve(promoted, sequence: pending.nextSequence)
                Issue.record("a registration whose self-signature does not cover it was approved")
            } catch let error as ClientError {
                guard case .integrity = error else {
                    Issue.record("expected an integrity error, got \(error)")
                    return
                }
            }
            #expect(try await admin.pending().registrations == pending.registrations, "still pending, unchanged")
            #expect(try await admin.users().users.map(\.status) == [.pending])
            #expect(try await Self.adminActions(admin).isEmpty, "nothing was approved")
        }
    }

    @Test(arguments: Backend.allCases)
    func aShareWhoseGrantNamesAnotherDoctorIsRefused(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vault, _) = try await world.patient("pat", on: try world.device("p"))
            _ = try await world.doctor("doc", on: try world.device("d"))
            let other = try await world.doctor("other", on: try world.device("o"))
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            let admin = try world.adminClient
            let before = try await Self.adminActions(admin)
            let pending = try await admin.pending()
            // The server presents the patient's grant to "doc" as a share with "other".
            var swapped = try #require(pending.shares.first)
            swapped.doctor = other.account.certificate
            swapped.share.doctorID = other.account.certificate.userID
            swapped.share.doctorUsername = "other"
            do {
                try await admin.approve(swapped, sequence: pending.nextSequence)
                Issue.record("a share whose grant names another doctor was approved")
            } catch let error as ClientError {
                guard case .integrity = error else {
                    Issue.record("expected an integrity error, got \(error)")
                    return
                }
            }
            let results = await admin.approveEach(of: AdminClientTests.replacingShares(pending, with: [swapped]))
            #expect(results.count == 1 && results.first?.error != nil, "approveEach reports it and goes on")
            #expect(try await Self.adminActions(admin) == before, "nothing was approved")
            #expect(try await other.patients().patients.isEmpty)
            #expect(try await vault.shares().map(\.state) == [.pending])
        }
    }

    static func replacingShares(_ pending: PendingResponse, with shares: [PendingShare]) -> PendingResponse {
        PendingResponse(registrations: pending.registrations, shares: shares, nextSequence: pending.nextSequence)
    }

    @Test func theKeyMustBeThePinnedOne() throws {
        let transport = try Transport(baseURL: "http://127.0.0.1:9")
        let key = SigningKeyPair.generate()
        #expect(throws: ClientError.self) { _ = try AdminClient(transport: transport, key: key, pinnedKey: SigningKeyPair.generate().publicKey) }
        #expect(try AdminClient(transport: transport, key: key, pinnedKey: key.publicKey).pinnedKey == key.publicKey)
    }
}
