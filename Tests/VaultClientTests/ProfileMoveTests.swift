import Foundation
import Testing
import VaultCore

@testable import VaultClient

#if canImport(Glibc)
import Glibc
#endif

/// `AccountManager.moveProfile` stopped inside its real steps (`AccountManager.$moveFault`, Docs/operations.md
/// §3, "Moving the service to a new address"): after a crash at any step the profile is usable at one address
/// and running the move again finishes it; after a failure at any step before the rename the device is as it was.
@Suite("Client: a profile moved to a new address of the same deployment, interrupted")
struct ProfileMoveTests {
    struct Unexpected: Error {}
    static let password = "move-me-please"

    /// The same server under its other loopback name.
    static func otherName(_ world: ClientWorld) -> String { world.baseURL.replacingOccurrences(of: "127.0.0.1", with: "localhost") }

    /// The account manager of device `name`'s home for `server` (through `transportURL` when given).
    static func manager(_ world: ClientWorld, _ name: String, server: String, transportURL: String? = nil) throws -> AccountManager {
        let home = Home(url: world.root.appendingPathComponent(name))
        let config = ClientConfiguration(server: server, home: home, adminKey: world.admin.publicKey, kdf: .interactive)
        return AccountManager(configuration: config, transport: try Transport(baseURL: transportURL ?? server, maxAttempts: 2, baseDelayMs: 10))
    }

    /// A patient logged in on device `name` with a remembered key.
    static func patient(_ world: ClientWorld, _ name: String, _ username: String) async throws -> (AccountManager, UnlockedAccount) {
        let manager = try Self.manager(world, name, server: world.baseURL)
        _ = try await manager.register(username: username, password: password, role: .patient)
        try await world.approveAll()
        return (manager, try await manager.login(username: username, password: password, remember: true))
    }

    /// `current.json` of a home, decoded.
    static func current(_ manager: AccountManager) throws -> [String: String] {
        let data = try Data(contentsOf: manager.configuration.home.currentURL)
        return try JSONDecoder().decode([String: String].self, from: data)
    }

    /// Every file under a home but `current.json`, with its bytes.
    static func files(_ manager: AccountManager) throws -> [String: Data] {
        let root = manager.configuration.home.url
        var out: [String: Data] = [:]
        guard let all = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil) else { return out }
        for case let url as URL in all where (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
            let name = String(url.path.dropFirst(root.path.count))
            if name != "/current.json" { out[name] = try Data(contentsOf: url) }
        }
        return out
    }

    @Test func aMoveThatDiesAfterAnyStepLeavesTheProfileUsableAtOneAddress() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let new = Self.otherName(world)
            for step in 1...7 {
                let (old, account) = try await Self.patient(world, "crash\(step)", "crash\(step)")
                let user = account.profile.username
                let there = try Self.manager(world, "crash\(step)", server: new)
                // Another user's entry for the new address: replaced as a login there would.
                try old.configuration.home.setCurrent(server: new, username: "someone")
                do {
                    _ = try await AccountManager.$moveFault.withValue(.crash(after: step)) {
                        try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
                    }
                    Issue.record("step \(step): the move did not stop")
                } catch is MoveCrashed {}

                let expected: [String: String] =
                    switch step {
                    case 1: [world.baseURL: user, new: "someone"]
                    case 2...6: [world.baseURL: user, new: user]
                    default: [new: user]
                    }
                #expect(try Self.current(old) == expected, "step \(step)")
                if step <= 4 {
                    // Before the rename: the old address, only.
                    #expect(throws: ClientError.self, "step \(step)") { try there.currentStore() }
                    let unlocked = try #require(try old.unlockRemembered(), "step \(step)")
                    #expect(unlocked.identity.signing.publicKey == account.identity.signing.publicKey, "step \(step)")
                    let moved = try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
                    #expect(moved.check == .session && moved.remembered && moved.deployment == .same, "step \(step)")
                    #expect(try Self.current(old) == [new: user], "step \(step)")
                } else {
                    #expect(throws: ClientError.self, "step \(step)") { try old.currentStore() }
                }
                // After the rename, or after the move ran again: the new address, only, with everything kept.
                let after = try #require(try there.unlockRemembered(), "step \(step)")
                #expect(after.profile.server == new && after.profile.userID == account.profile.userID, "step \(step)")
                #expect(after.session?.token == account.session?.token, "step \(step)")
                #expect(!FileManager.default.fileExists(atPath: after.store.stagedIdentityURL.path), "step \(step)")
                #expect(!FileManager.default.fileExists(atPath: account.store.folder.path), "step \(step)")
                #expect(try there.unlockRemembered()?.identity.signing.publicKey == account.identity.signing.publicKey, "step \(step)")
            }
        }
    }

    @Test func aMoveThatFailsBeforeItsRenamePutsBackEveryFileAndEntry() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let new = Self.otherName(world)
            for step in 0...4 {
                let (old, account) = try await Self.patient(world, "fail\(step)", "fail\(step)")
                let user = account.profile.username
                let there = try Self.manager(world, "fail\(step)", server: new)
                try old.configuration.home.setCurrent(server: new, username: "someone")
                // A session the server does not know: the move logs in at the new address and writes its session.
                try account.store.save(StoredSession(token: String(repeating: "A", count: 43), expiresAt: Date().unixMillis + 3_600_000))
                let before = try Self.files(old)
                do {
                    _ = try await AccountManager.$moveFault.withValue(.fail(after: step)) {
                        try await old.moveProfile(to: new, through: there.transport, password: { Self.password })
                    }
                    Issue.record("step \(step): the move did not fail")
                } catch let e as ClientError {
                    #expect("\(e)".hasSuffix("nothing was moved"), "step \(step): \(e)")
                }
                #expect(try Self.current(old) == [world.baseURL: user, new: "someone"], "step \(step)")
                #expect(try Self.files(old) == before, "step \(step)")
                let back = try #require(try old.unlockRemembered(), "step \(step)")
                #expect(back.profile.server == world.baseURL && back.store.folder.path == account.store.folder.path, "step \(step)")
            }
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
            let before = try Self.files(old)
            do {
                _ = try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
                Issue.record("the move succeeded through a file")
            } catch let e as ClientError {
                #expect("\(e)".contains("nothing was moved"), "\(e)")
            }
            #expect(try Self.files(old) == before)
            #expect(try Self.current(old) == [world.baseURL: "nina"])
            let back = try #require(try old.unlockRemembered())
            #expect(back.profile.server == world.baseURL && back.store.folder.path == account.store.folder.path)
            #expect(throws: ClientError.self) { try there.currentStore() }

            try FileManager.default.removeItem(at: blocker)
            let moved = try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
            #expect(moved.to == new)
            #expect(try there.unlockRemembered()?.profile.server == new)
        }
    }

    @Test func theRenameNeverReplacesAFolderMadeAfterTheCheck() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-rename-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let (source, target) = (root.appendingPathComponent("old"), root.appendingPathComponent("new"))
        try SecureFiles.ensureDirectory(source)
        try Data("kept".utf8).write(to: source.appendingPathComponent("profile.json"))
        // An empty folder, which a plain rename(2) would silently replace.
        try SecureFiles.ensureDirectory(target)
        #expect(SecureFiles.renameNoReplace(source, to: target) == EEXIST)
        #expect(FileManager.default.fileExists(atPath: source.appendingPathComponent("profile.json").path))
        try FileManager.default.removeItem(at: target)
        #expect(SecureFiles.renameNoReplace(source, to: target) == 0)
        #expect(try Data(contentsOf: target.appendingPathComponent("profile.json")) == Data("kept".utf8))
    }

    @Test func anOldAddressThatNoLongerAnswersIsSaidSoAndTheParametersStillChecked() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (_, account) = try await Self.patient(world, "gone", "gus")
            let new = Self.otherName(world)
            // The old address's manager, whose server is no longer there.
            let old = try Self.manager(world, "gone", server: world.baseURL, transportURL: "http://127.0.0.1:1")
            let there = try Self.manager(world, "gone", server: new)
            let moved = try await old.moveProfile(to: new, through: there.transport, password: { throw Unexpected() })
            #expect(moved.deployment == .unchecked && moved.check == .session)
            #expect(try there.unlockRemembered()?.profile.userID == account.profile.userID)
        }
    }
}
