import Foundation
import Testing
import VaultClient
import VaultCore

/// `AccountManager.moveProfile` where a crash or a failed rename leaves it (Docs/operations.md §3, "Moving
/// the service to a new address"): the profile stays usable at one address, and running the move again
/// finishes it.
@Suite("Client: a profile moved to a new address of the same deployment, interrupted")
struct ProfileMoveTests {
    struct Unexpected: Error {}

    /// The same server under its other loopback name.
    static func otherName(_ world: ClientWorld) -> String { world.baseURL.replacingOccurrences(of: "127.0.0.1", with: "localhost") }

    /// The account manager of device `name`'s home for `server`.
    static func manager(_ world: ClientWorld, _ name: String, server: String) throws -> AccountManager {
        let home = Home(url: world.root.appendingPathComponent(name))
        let config = ClientConfiguration(server: server, home: home, adminKey: world.admin.publicKey, kdf: .interactive)
        return AccountManager(configuration: config, transport: try Transport(baseURL: server, maxAttempts: 2, baseDelayMs: 10))
    }

    /// A patient logged in on device `name` with a remembered key.
    static func patient(_ world: ClientWorld, _ name: String, _ username: String) async throws -> (AccountManager, UnlockedAccount) {
        let manager = try Self.manager(world, name, server: world.baseURL)
        _ = try await manager.register(username: username, password: "move-me-please", role: .patient)
        try await world.approveAll()
        return (manager, try await manager.login(username: username, password: "move-me-please", remember: true))
    }

    @Test func aMoveCutOffBeforeItsRenameLeavesTheOldProfileWorkingAndFinishesWhenRunAgain() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (old, account) = try await Self.patient(world, "a", "mona")
            let new = Self.otherName(world)
            // What the move writes before its rename (steps 1 and 2 of AccountManager.move), then a crash.
            var profile = account.profile
            profile.server = new
            try old.configuration.home.setCurrent(server: new, username: "mona")
            SecureFiles.erase(account.store.rememberedIdentityURL)
            try account.store.save(profile)
            try account.store.remember(account.identity, server: new)

            let there = try Self.manager(world, "a", server: new)
            #expect(throws: ClientError.self) { try there.currentStore() }
            let unlocked = try #require(try old.unlockRemembered(), "the old address still unlocks with the remembered key")
            #expect(unlocked.identity.signing.publicKey == account.identity.signing.publicKey)

            let moved = try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
            #expect(moved.check == .session && moved.remembered)
            #expect(throws: ClientError.self) { try old.currentStore() }
            let after = try #require(try there.unlockRemembered())
            #expect(after.profile.server == new && after.profile.userID == account.profile.userID)
            #expect(after.store.folder.path == moved.folder.path && after.session?.token == account.session?.token)
        }
    }

    @Test func aRenameThatFailsPutsTheProfileBackAtTheOldAddress() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (old, account) = try await Self.patient(world, "b", "nina")
            let new = Self.otherName(world)
            let there = try Self.manager(world, "b", server: new)
            // A file where the new address's folder of profiles would be: the rename fails (not a directory).
            let blocker = there.configuration.home.store(server: new, username: "nina").folder.deletingLastPathComponent()
            try SecureFiles.ensureDirectory(blocker.deletingLastPathComponent())
            try Data("x".utf8).write(to: blocker)
            do {
                _ = try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
                Issue.record("the move succeeded through a file")
            } catch let e as ClientError {
                #expect("\(e)".contains("nothing was moved"), "\(e)")
            }
            let back = try #require(try old.unlockRemembered())
            #expect(back.profile.server == world.baseURL && back.store.folder.path == account.store.folder.path)
            #expect(throws: ClientError.self) { try there.currentStore() }

            try FileManager.default.removeItem(at: blocker)
            let moved = try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
            #expect(moved.to == new)
            #expect(try there.unlockRemembered()?.profile.server == new)
        }
    }
}
