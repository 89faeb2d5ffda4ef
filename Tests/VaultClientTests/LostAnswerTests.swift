import Foundation
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

/// A request that went through but whose answer was lost on the way back (a proxy dropping the
/// connection, a phone network, a rolling restart) is retried by the client with the same
/// `Idempotency-Key`, and the command succeeds once, with exactly one effect (Docs/design.md §6.2). The
/// proxy in these tests passes each request on, waits for the server's answer, and cuts the connection
/// instead of relaying it.
@Suite("Client: retries after a lost answer")
struct LostAnswerTests {
    /// A world whose devices reach the server through a `CuttingProxy`.
    struct ProxiedWorld: Sendable {
        let world: ClientWorld
        let proxy: CuttingProxy

        func device(_ name: String) throws -> Device {
            let home = Home(url: world.root.appendingPathComponent(name))
            let config = ClientConfiguration(server: proxy.baseURL, home: home, adminKey: world.admin.publicKey, kdf: .interactive)
            let transport = try Transport(baseURL: proxy.baseURL, maxAttempts: 3, baseDelayMs: 10)
            return Device(accounts: AccountManager(configuration: config, transport: transport), transport: transport, admin: world.admin.publicKey)
        }

        var admin: AdminClient { get throws { try AdminClient(baseURL: proxy.baseURL, key: world.admin, maxAttempts: 3, baseDelayMs: 10) } }

        /// Registers, approves (directly, not through the proxy) and logs in.
        func patient(_ username: String, password: String = "patient password") async throws -> (Device, PatientVault) {
            let device = try device(username)
            _ = try await device.accounts.register(username: username, password: password, role: .patient)
            try await world.approveAll()
            let account = try await device.accounts.login(username: username, password: password)
            return (device, try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey))
        }

        /// Every answer the proxy relayed, none of them a refusal (a retry that ran the request again).
        func expectNoRefusal(_ comment: Comment) {
            let refused = proxy.answers.filter { $0 >= 400 }
            #expect(refused.isEmpty, "answers \(refused): \(comment)")
        }

        static func run(_ backend: Backend, _ body: @escaping @Sendable (ProxiedWorld) async throws -> Void) async throws {
            try await ClientWorld.run(backend) { world in
                let port = try #require(URLComponents(string: world.baseURL)?.port)
                let proxy = try CuttingProxy(upstreamPort: UInt16(port))
                defer { proxy.stop() }
                try await body(ProxiedWorld(world: world, proxy: proxy))
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func aShareGrantAndItsRevocationWhoseAnswersAreLostHappenOnce(backend: Backend) async throws {
        try await ProxiedWorld.run(backend) { w in
            let doctorDevice = try w.world.device("drbob")
            _ = try await w.world.doctor("drbob", on: doctorDevice)
            let (_, vault) = try await w.patient("alice")
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()

            w.proxy.cut("POST", Routes.shares)
            let share = try await vault.grant(doctor: "drbob", category: "interventions")
            #expect(w.proxy.cutRequests == ["POST \(Routes.shares)"])
            w.expectNoRefusal("the share request's retry")
            let filed = try await w.world.repository.shares(patientID: vault.account.profile.userID)
            #expect(filed.count == 1)
            #expect(filed.first?.id == share.shareID)

            try await w.world.approveAll()
            _ = try await vault.sync()
            let path = Routes.shareRevoke(share.shareID.uuidString)
            w.proxy.cut(times: 1) { m, p in m == "POST" && p.lowercased() == path.lowercased() }
            _ = try await vault.revoke(doctor: "drbob", category: "interventions")
            #expect(w.proxy.cutRequests.count == 2)
            w.expectNoRefusal("the revocation's retry")
            let audit = try await w.world.repository.auditEntries(after: 0, limit: 10_000, patientID: nil)
            #expect(audit.filter { $0.action == "share.requested" }.count == 1)
            #expect(audit.filter { $0.action == "share.revoked" }.count == 1)
        }
    }

    /// Before keys, the retry of a password change whose first try went through was refused (the old password
    /// proves nothing any more) and the device kept the old key bundle: the next unlock with the new password
    /// failed on this device.
    @Test(arguments: Backend.allCases)
    func aPasswordChangeWhoseAnswerIsLostSucceedsAndTheNewPasswordOpens(backend: Backend) async throws {
        try await ProxiedWorld.run(backend) { w in
            let (device, vault) = try await w.patient("alice", password: "old password")
            w.proxy.cut("POST", Routes.passwordChange)
            try await device.accounts.changePassword(vault.account, current: "old password", new: "new password")
            #expect(w.proxy.cutRequests == ["POST \(Routes.passwordChange)"])
            w.expectNoRefusal("the password change's retry")
            #expect(try await device.accounts.unlock(password: "new password").identity.userID == vault.account.identity.userID)
            await #expect(throws: ClientError.self) { _ = try await device.accounts.unlock(password: "old password") }
            let other = try w.device("alice-phone")
            _ = try await other.accounts.login(username: "alice", password: "new password")
        }
    }

    /// Before keys, the retry was refused (the current recovery key had changed) and the new key the server
    /// kept was never shown: the account's recovery key was one nobody had.
    @Test(arguments: Backend.allCases)
    func aRecoveryKeyRotationWhoseAnswerIsLostGivesTheKeyTheServerKeeps(backend: Backend) async throws {
        try await ProxiedWorld.run(backend) { w in
            let device = try w.device("alice")
            let registration = try await device.accounts.registerWithRecovery(username: "alice", password: "patient password", role: .patient)
            try await w.world.approveAll()
            let account = try await device.accounts.login(username: "alice", password: "patient password")
            w.proxy.cut("POST", Routes.recoveryRotate)
            let rotated = try await device.accounts.rotateRecoveryKey(
                account,
                password: "patient password",
                currentRecoveryKey: registration.recoveryKey
            )
            #expect(w.proxy.cutRequests == ["POST \(Routes.recoveryRotate)"])
            w.expectNoRefusal("the rotation's retry")
            // The key shown is the one that recovers the account.
            let recovered = try await w.device("alice-new").accounts.recover(username: "alice", recoveryKey: rotated, newPassword: "a third password")
            #expect(recovered.identity.userID == account.identity.userID)
        }
    }

    @Test(arguments: Backend.allCases)
    func adminApprovalsWhoseAnswersAreLostAreMadeOnce(backend: Backend) async throws {
        try await ProxiedWorld.run(backend) { w in
            let device = try w.device("alice")
            _ = try await device.accounts.register(username: "alice", password: "patient password", role: .patient)
            let doctor = try w.device("drbob")
            _ = try await doctor.accounts.register(username: "drbob", password: "doctor password", role: .doctor)
            w.proxy.cut(times: 2) { m, p in m == "POST" && p.hasPrefix("/v1/admin/registrations/") && p.hasSuffix("/approve") }
            let approved = try await w.admin.approveAll()
            #expect(approved.count == 2)
            #expect(w.proxy.cutRequests.count == 2)
            w.expectNoRefusal("the approvals' retries")
            _ = try await device.accounts.login(username: "alice", password: "patient password")
            let audit = try await w.world.repository.auditEntries(after: 0, limit: 10_000, patientID: nil)
            #expect(audit.filter { $0.action == "account.approved" }.count == 2)
        }
    }

    /// Before keys, the retry of a deletion met a session the first try had ended (401) and the device kept
    /// every copy of the deleted account.
    @Test(arguments: Backend.allCases)
    func anAccountDeletionWhoseAnswerIsLostErasesTheDevice(backend: Backend) async throws {
        try await ProxiedWorld.run(backend) { w in
            let (device, vault) = try await w.patient("alice")
            let folder = vault.account.store.folder
            w.proxy.cut("POST", Routes.deleteAccount)
            _ = try await device.accounts.deleteAccount(vault.account, proof: .password("patient password"))
            #expect(w.proxy.cutRequests == ["POST \(Routes.deleteAccount)"])
            w.expectNoRefusal("the deletion's retry")
            #expect(!FileManager.default.fileExists(atPath: folder.path), "this device's copies are erased")
            #expect(try await w.world.repository.user(username: "alice") == nil)
        }
    }

    /// A login whose answer is lost makes one session, not one per try.
    @Test(arguments: Backend.allCases)
    func aLoginWhoseAnswerIsLostMakesOneSession(backend: Backend) async throws {
        try await ProxiedWorld.run(backend) { w in
            let (device, vault) = try await w.patient("alice")
            let before = try await device.accounts.sessions(vault.account).count
            w.proxy.cut("POST", Routes.login)
            let account = try await device.accounts.login(username: "alice", password: "patient password")
            #expect(w.proxy.cutRequests == ["POST \(Routes.login)"])
            let sessions = try await device.accounts.sessions(account)
            #expect(sessions.count == before + 1)
        }
    }
}
