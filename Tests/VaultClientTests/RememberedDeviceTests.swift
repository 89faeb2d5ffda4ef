import Foundation
import Hummingbird
import HummingbirdTesting
import Synchronization
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultTestSupport

/// Secrets at rest and password-hashing parameters (Docs/envelope-v1.md §2, §2.2): what `--remember`
/// keeps, what unlocks with it, how old keyrings and old remembered keys move over, how a server that
/// weakens the parameters is refused, and how passwords are normalised.
@Suite("Client: remembered device key, local storage key, KDF parameters, NFC passwords")
struct RememberedDeviceTests {
    /// Every regular file under `folder`.
    static func files(under folder: URL) -> [URL] {
        let all = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)?.allObjects as? [URL] ?? []
        return all.filter { !$0.hasDirectoryPath }
    }

    /// Whether `data` holds `secret` raw, as base64url, as base64 or as hex.
    static func holds(_ data: Data, _ secret: [UInt8]) -> Bool {
        let forms = [secret, Array(Base64URL.encode(secret).utf8), Array(Data(secret).base64EncodedString().utf8), Array(Hex.encode(secret).utf8)]
        return forms.contains { data.range(of: Data($0)) != nil }
    }

    static func wrappingKey(_ account: UnlockedAccount, _ password: String) throws -> SymmetricKey {
        try PasswordKeys.derive(password: password, salt: account.profile.keyBundle.salt, parameters: account.profile.keyBundle.kdf).wrappingKey
    }

    @Test func theRememberedKeyIsRandomAndUnlocksWithoutThePassword() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let password = "remember-me-1"
            _ = try await device.accounts.register(username: "rita", password: password, role: .patient)
            try await world.approveAll()
            let account = try await device.accounts.login(username: "rita", password: password, remember: true)
            let vault = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            let store = account.store
            let wrapping = try Self.wrappingKey(account, password)
            let deviceKey = try #require(try store.loadDeviceKey())
            #expect(deviceKey != wrapping, "the remembered key must not be the password-derived wrapping key")
            #expect(SecureFiles.permissions(store.rememberedIdentityURL) == 0o600)
            #expect(Self.holds(try Data(contentsOf: store.deviceKeyURL), deviceKey.copyBytes()), "the scan finds what a file holds")
            let identity = account.identity
            let secrets = [
                ("wrapping key", wrapping.copyBytes()), ("signing seed", identity.signing.seed.copyBytes()),
                ("box secret", identity.box.secretKey.copyBytes()), ("record-id key", identity.recordIDKey.copyBytes()),
                ("local storage key", account.localStorageKey.copyBytes()),
            ]
            for file in Self.files(under: world.root.appendingPathComponent("a")) {
                let data = try Data(contentsOf: file)
                for (name, secret) in secrets { #expect(!Self.holds(data, secret), "\(file.lastPathComponent) holds the \(name)") }
            }

            // The remembered path never needs the wrapping key: with the stored key bundle made useless,
            // the remembered key still unlocks, and the patient reads and syncs.
            var profile = try #require(try store.loadProfile())
            let bundle = profile.keyBundle
            profile.keyBundle.ciphertext = Base64URL.encode(RandomBytes.bytes(count: 128))
            try store.save(profile)
            let unlocked = try device.accounts.unlock(password: nil)
            #expect(unlocked.identity.signing.publicKey == identity.signing.publicKey)
            #expect(unlocked.localStorageKey == account.localStorageKey)
            let reopened = try PatientVault(account: unlocked, transport: device.transport, adminKey: world.admin.publicKey)
            #expect(try await reopened.activities().map(\.id) == ["walk"])
            _ = try await reopened.recordOutcome(activityID: "walk", occurrence: 0, value: Sample.value(1))
            let summary = try await reopened.sync()
            #expect(summary.pushed == 1)
            profile.keyBundle = bundle
            try store.save(profile)

            try await device.accounts.logout()
            #expect(!FileManager.default.fileExists(atPath: store.deviceKeyURL.path))
            #expect(!FileManager.default.fileExists(atPath: store.rememberedIdentityURL.path))
            #expect(throws: ClientError.notPermitted(code: nil, "a password is needed to unlock the keys (or log in with --remember)")) {
                _ = try device.accounts.unlock(password: nil)
            }
            #expect(try device.accounts.unlock(password: password).identity.signing.publicKey == identity.signing.publicKey)
        }
    }

    @Test func aTamperedOrMisplacedIdentityCopyIsAnIntegrityFailure() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            _ = try await world.patient("tess", on: device, password: "tamper-pw-1")
            let account = try await device.accounts.login(username: "tess", password: "tamper-pw-1", remember: true)
            let store = account.store
            let original = try Data(contentsOf: store.rememberedIdentityURL)
            var copy = try #require(try store.loadRememberedIdentity())
            var sealed = try Base64URL.decode(copy.ciphertext)
            sealed[sealed.count / 2] ^= 0x01
            copy.ciphertext = Base64URL.encode(sealed)
            for bytes in [try JSONEncoder().encode(copy), Data("{\"version\": 1".utf8), Data()] {
                try SecureFiles.write(bytes, to: store.rememberedIdentityURL)
                let error = #expect(throws: ClientError.self) { _ = try device.accounts.unlock(password: nil) }
                guard case let .integrity(message)? = error else {
                    Issue.record("expected an integrity failure, got \(String(describing: error))")
                    continue
                }
                #expect(message.contains("log in again"), "\(message)")
            }
            try SecureFiles.write(original, to: store.rememberedIdentityURL)
            _ = try device.accounts.unlock(password: nil)

            // The associated data binds the user id and the server: a copy opens for neither another
            // account nor the same account on another server.
            let key = try #require(try store.loadDeviceKey())
            let good = try #require(try store.loadRememberedIdentity())
            #expect(throws: TrustError.self) { _ = try good.open(deviceKey: key, userID: UUID(), server: world.baseURL) }
            #expect(throws: TrustError.self) { _ = try good.open(deviceKey: key, userID: account.profile.userID, server: "http://evil.example") }
            #expect(throws: TrustError.self) { _ = try good.open(deviceKey: .generate(), userID: account.profile.userID, server: world.baseURL) }
        }
    }

    @Test func aWrappingKeyRememberedTheOldWayIsReplacedByADeviceKey() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (vault, password) = try await world.patient("olga", on: device)
            try await vault.addActivity(try Sample.activity("walk"))
            let store = vault.account.store
            let wrapping = try Self.wrappingKey(vault.account, password)
            try SecureFiles.write(Data(Base64URL.encode(wrapping.copyBytes()).utf8), to: store.deviceKeyURL)
            #expect(!FileManager.default.fileExists(atPath: store.rememberedIdentityURL.path))

            let account = try #require(try device.accounts.unlockRemembered())
            #expect(account.identity.signing.publicKey == vault.account.identity.signing.publicKey)
            #expect(try store.loadDeviceKey() != wrapping, "the old key is overwritten")
            #expect(FileManager.default.fileExists(atPath: store.rememberedIdentityURL.path))
            #expect(try device.accounts.unlock(password: nil).identity.box.publicKey == vault.account.identity.box.publicKey)

            // A key without a copy that opens nothing (an interrupted --remember) is dropped, not trusted.
            store.forgetDevice()
            try SecureFiles.write(Data(Base64URL.encode(RandomBytes.bytes(count: 32)).utf8), to: store.deviceKeyURL)
            #expect(try device.accounts.unlockRemembered() == nil)
            #expect(!FileManager.default.fileExists(atPath: store.deviceKeyURL.path))
        }
    }

    /// Seals a keyring exactly as clients did before the local storage key: under the `CVkeyrng` subkey
    /// of the password-derived wrapping key.
    static func writeOldKeyring(_ tresors: [Tresor], wrappingKey: SymmetricKey, ownerID: UUID, to url: URL) throws {
        var w = CanonicalWriter(domain: "CareVault-keyring-v1")
        w.append(UInt32(tresors.count))
        for t in tresors.sorted(by: { $0.category < $1.category }) {
            w.append(t.ownerID)
            w.append(t.category)
            w.append(UInt32(t.keys.count))
            for (epoch, key) in t.keys.sorted(by: { $0.key < $1.key }) {
                w.append(epoch)
                w.append(key.copyBytes())
            }
        }
        var ad = CanonicalWriter(domain: "CareVault-keyring-v1")
        ad.append(ownerID)
        let nonce = AEADNonce.random()
        let sealed = AEAD.seal(
            w.bytes,
            key: wrappingKey.deriveSubkey(id: 1, context: try KDFContext("CVkeyrng")),
            nonce: nonce,
            associatedData: ad.bytes
        )
        let json = ["nonce": Base64URL.encode(nonce.bytes), "ciphertext": Base64URL.encode(sealed)]
        try SecureFiles.write(try JSONEncoder().encode(json), to: url)
    }

    @Test func aKeyringSealedTheOldWayIsResealedAfterAPasswordLoginOrUnlock() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            let (vault, password) = try await world.patient("kira", on: device)
            try await vault.addActivity(try Sample.activity("walk"))
            try await vault.addActivity(try Sample.activity("scale", category: "assessments"))
            _ = try await vault.sync()
            let account = vault.account
            let url = account.store.keyringURL
            let me = account.profile.userID
            let ring = try Keyring.load(from: url, key: account.localStorageKey, ownerID: me)
            #expect(Set(ring.tresors.keys) == ["interventions", "assessments"])
            let wrapping = try Self.wrappingKey(account, password)

            for unlock in ["login", "unlock"] {
                try Self.writeOldKeyring(Array(ring.tresors.values), wrappingKey: wrapping, ownerID: me, to: url)
                #expect(throws: ClientError.self) { _ = try Keyring.load(from: url, key: account.localStorageKey, ownerID: me) }
                let unlocked =
                    unlock == "login"
                    ? try await device.accounts.login(username: "kira", password: password)
                    : try device.accounts.unlock(password: password)
                let migrated = try Keyring.load(from: url, key: unlocked.localStorageKey, ownerID: me)
                #expect(Set(migrated.tresors.keys) == ["interventions", "assessments"], "after \(unlock)")
                #expect(migrated["interventions"]?.keys == ring["interventions"]?.keys, "after \(unlock)")
                #expect(throws: ClientError.self, "after \(unlock) the old key opens nothing") {
                    _ = try Keyring.load(from: url, key: wrapping, ownerID: me)
                }
                let reopened = try PatientVault(account: unlocked, transport: device.transport, adminKey: world.admin.publicKey)
                #expect(try await reopened.activities().map(\.id).sorted() == ["scale", "walk"])
            }
        }
    }

    /// A device of `world` that registers accounts under `kdf` (the harness's devices use INTERACTIVE).
    static func accounts(_ world: ClientWorld, _ name: String, kdf: KDFParameters) throws -> AccountManager {
        let config = ClientConfiguration(
            server: world.baseURL,
            home: Home(url: world.root.appendingPathComponent(name)),
            adminKey: world.admin.publicKey,
            kdf: kdf
        )
        return AccountManager(configuration: config, transport: try Transport(baseURL: world.baseURL, maxAttempts: 2, baseDelayMs: 10))
    }

    @Test func aServerOfferingWeakerOrOtherParametersThanTheProfileIsRefusedBeforeAnyWork() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let accounts = try Self.accounts(world, "strong", kdf: .moderate)
            _ = try await accounts.register(username: "wes", password: "strong-pass-1", role: .patient)
            try await world.approveAll()
            let stored = try #require(try accounts.currentStore().loadProfile()).keyBundle
            let moderate = #""opsLimit":3"#
            let interactive = #""opsLimit":2"#
            let moderateMem = #""memLimitBytes":268435456"#
            let interactiveMem = #""memLimitBytes":67108864"#
            func edit(_ pairs: [(String, String)]) async throws {
                var column = "registration"
                for (from, to) in pairs { column = "replace(\(column), '\(from)', '\(to)')" }
                try await world.repository.attackerExecutes("UPDATE users SET registration = \(column) WHERE username = 'wes'")
            }
            func refusal(_ expected: String) async throws {
                let started = ContinuousClock.now
                let error = await #expect(throws: ClientError.self) { _ = try await accounts.login(username: "wes", password: "strong-pass-1") }
                #expect(ContinuousClock.now - started < .seconds(1), "refused before any Argon2id work")
                guard case let .integrity(message)? = error else {
                    Issue.record("expected an integrity failure, got \(String(describing: error))")
                    return
                }
                #expect(message.contains(expected), "\(message)")
            }

            try await edit([(moderate, interactive), (moderateMem, interactiveMem)])
            #expect(try await world.repository.user(username: "wes")?.registration.kdf == .interactive, "the edit took")
            try await refusal("weaker password-hashing parameters")

            let salt = String(decoding: try JSONEncoder().encode(stored.salt), as: UTF8.self)
            let otherSalt = String(decoding: try JSONEncoder().encode(Salt.random()), as: UTF8.self)
            try await edit([(interactive, moderate), (interactiveMem, moderateMem), (salt, otherSalt)])
            #expect(try await world.repository.user(username: "wes")?.registration.salt != stored.salt, "the edit took")
            try await refusal("differ from what this device stored")
            let attempts = try await world.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).filter { $0.action.hasPrefix("login") }
            #expect(attempts.isEmpty, "no login key was sent")

            // Put back as registered, the same device logs in under its stored parameters.
            try await edit([(otherSalt, salt)])
            let account = try await accounts.login(username: "wes", password: "strong-pass-1")
            #expect(account.profile.keyBundle.kdf == .moderate)
        }
    }

    @Test func withoutAProfileParametersBelowTheFloorAreRefusedBeforeAnyWork() async throws {
        let logins = Mutex(0)
        let router = Router()
        let offer = #"{"kdf":{"algorithm":"argon2id13","opsLimit":1,"memLimitBytes":8192},"salt":"\#(Base64URL.encode(Salt.random().bytes))"}"#
        router.post(RouterPath(Routes.loginParameters)) { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(string: offer)))
        }
        router.post(RouterPath(Routes.login)) { _, _ -> Response in
            logins.withLock { $0 += 1 }
            return Response(status: .unauthorized)
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-weak-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: root) }
            let server = "http://127.0.0.1:\(client.port!)"
            let config = ClientConfiguration(server: server, home: Home(url: root), adminKey: SigningKeyPair.generate().publicKey)
            let accounts = AccountManager(configuration: config, transport: try Transport(baseURL: server, maxAttempts: 1))
            let started = ContinuousClock.now
            let error = await #expect(throws: ClientError.self) { _ = try await accounts.login(username: "nobody", password: "any-password") }
            #expect(ContinuousClock.now - started < .seconds(1))
            guard case let .integrity(message)? = error else {
                Issue.record("expected an integrity failure, got \(String(describing: error))")
                return
            }
            #expect(message.contains("unacceptable password-hashing parameters") && message.contains("below the floor"), "\(message)")
            #expect(logins.withLock { $0 } == 0, "no login key was derived or sent")
        }
    }

    @Test func passwordsAreNormalisedToNFCAndOldRawPasswordsStillOpen() async throws {
        let nfc = "caf\u{e9}-pass-1"
        let nfd = "cafe\u{301}-pass-1"
        #expect(Array(nfc.utf8) != Array(nfd.utf8))
        #expect(PasswordKeys.forms(of: nfc) == [.nfc])
        #expect(PasswordKeys.forms(of: nfd) == [.nfc, .raw])
        try await ClientWorld.run(.sqlite) { world in
            // Registered with the NFC form, logged in and unlocked with the NFD form.
            let device = try world.device("a")
            _ = try await device.accounts.register(username: "chloe", password: nfc, role: .patient)
            try await world.approveAll()
            let account = try await device.accounts.login(username: "chloe", password: nfd)
            #expect(try device.accounts.unlock(password: nfd).identity.signing.publicKey == account.identity.signing.publicKey)
            #expect(throws: ClientError.self) { _ = try device.accounts.unlock(password: "cafe-pass-1") }

            // An account registered before normalisation, from the raw NFD bytes, still logs in and unlocks.
            let legacy = try world.device("b")
            let identity = Identity.generate()
            let salt = Salt.random()
            let raw = try PasswordKeys.derive(password: nfd, salt: salt, parameters: .interactive, form: .raw)
            #expect(raw.wrappingKey != (try PasswordKeys.derive(password: nfd, salt: salt, parameters: .interactive).wrappingKey))
            let request = try RegistrationRequest.make(
                identity: identity,
                username: "leon",
                role: .patient,
                passwordKeys: raw,
                kdf: .interactive,
                salt: salt,
                requestedAt: Date().unixMillis
            )
            let _: RegisterResponse = try await legacy.transport.send(.POST, Routes.register, body: request)
            try await world.approveAll()
            let old = try await legacy.accounts.login(username: "leon", password: nfd)
            #expect(old.identity.signing.publicKey == identity.signing.publicKey)
            #expect(try legacy.accounts.unlock(password: nfd).identity.box.publicKey == identity.box.publicKey)
            #expect(throws: ClientError.self) { _ = try legacy.accounts.unlock(password: "cafe-pass-1") }
        }
    }
}
