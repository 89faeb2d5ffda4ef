import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

@testable import VaultClient

/// A device keeps the newest signed password change it accepted (Docs/envelope-v1.md §2.4): a server that
/// serves an older one again (its parameters, salt, verifier and key bundle, all validly signed once) is
/// refused before the device derives or sends anything.
@Suite("Client: a replayed password change (both backends)")
struct CredentialReplayTests {
    @Test(arguments: Backend.allCases)
    func aDeviceRefusesAnOlderPasswordChangeTheServerServesAgain(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let phone = try world.device("phone")
            let laptop = try world.device("laptop")
            _ = try await phone.accounts.register(username: "alice", password: "password one", role: .patient)
            try await world.approveAll()
            var account = try await phone.accounts.login(username: "alice", password: "password one")
            // The laptop knows the account from before any change (its profile holds the registration's salt).
            _ = try await laptop.accounts.login(username: "alice", password: "password one")
            let lifecycle: any AccountLifecycleRepository = world.repository
            try await phone.accounts.changePassword(account, current: "password one", new: "password two")
            let older = try #require(try await lifecycle.accountState(userID: account.profile.userID).credentialUpdate)
            account = try await phone.accounts.login(username: "alice", password: "password two")
            #expect(account.profile.credentialParameters == older.parameters, "a device keeps the change it made")
            try await phone.accounts.changePassword(account, current: "password two", new: "password three")
            let newer = try #require(try await lifecycle.accountState(userID: account.profile.userID).credentialUpdate)
            #expect(newer.changedAt > older.changedAt)
            // The laptop accepts the newest signed change and keeps it.
            let stale = try await laptop.accounts.login(username: "alice", password: "password three")
            #expect(stale.profile.credentialParameters == newer.parameters)

            // The server goes back to the older change, validly signed once, which "password two" (leaked,
            // say: why it was changed) opens.
            try await world.repository.databaseOperator.setCredentialUpdate(of: account.profile.userID, older)
            let before = try await world.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).count
            for (device, password) in [(laptop, "password two"), (laptop, "password three"), (phone, "password two")] {
                do {
                    _ = try await device.accounts.login(username: "alice", password: password)
                    Issue.record("a device logged in under an older password change than it accepted (\(password))")
                } catch let ClientError.integrity(message) {
                    #expect(message.contains("older change replayed"), "\(message)")
                }
            }
            #expect(
                try await world.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).count == before,
                "refused before any login was sent"
            )
            // The newest change again: accepted as before.
            try await world.repository.databaseOperator.setCredentialUpdate(of: account.profile.userID, newer)
            #expect(try await laptop.accounts.login(username: "alice", password: "password three").profile.userID == account.profile.userID)
        }
    }
}
