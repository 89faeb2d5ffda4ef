import Foundation
import Synchronization
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient

#if canImport(Glibc)
import Glibc
#endif

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

    static func wrappingKey(_ account: UnlockedAccount, _ password: String) async throws -> SymmetricKey {
        try await PasswordKeys.derive(password: password, salt: account.profile.keyBundle.salt, parameters: account.profile.keyBundle.kdf).wrappingKey
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
            let wrapping = try await Self.wrappingKey(account, password)
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
            let unlocked = try await device.accounts.unlock(password: nil)
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
            await #expect(throws: ClientError.notPermitted(code: nil, "a password is needed to unlock the keys (or log in with --remember)")) {
                _ = try await device.accounts.unlock(password: nil)
            }
            #expect(try await device.accounts.unlock(password: password).identity.signing.publicKey == identity.signing.publicKey)
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
                let error = await #expect(throws: ClientError.self) { _ = try await device.accounts.unlock(password: nil) }
                guard case let .integrity(message)? = error else {
                    Issue.record("expected an integrity failure, got \(String(describing: error))")
                    continue
                }
                #expect(message.contains("log in again"), "\(message)")
            }
            try SecureFiles.write(original, to: store.rememberedIdentityURL)
            _ = try await device.accounts.unlock(password: nil)

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
            let wrapping = try await Self.wrappingKey(vault.account, password)
            try SecureFiles.write(Data(Base64URL.encode(wrapping.copyBytes()).utf8), to: store.deviceKeyURL)
            #expect(!FileManager.default.fileExists(atPath: store.rememberedIdentityURL.path))

            let account = try #require(try device.accounts.unlockRemembered())
            #expect(account.identity.signing.publicKey == vault.account.identity.signing.publicKey)
            #expect(try store.loadDeviceKey() != wrapping, "the old key is overwritten")
            #expect(FileManager.default.fileExists(atPath: store.rememberedIdentityURL.path))
            #expect(try await device.accounts.unlock(password: nil).identity.box.publicKey == vault.account.identity.box.publicKey)

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
            let ring = await vault.keyring
            #expect(Set(ring.tresors.keys) == ["interventions", "assessments"])
            #expect(!FileManager.default.fileExists(atPath: url.path), "the keyring is kept in the database")
            let wrapping = try await Self.wrappingKey(account, password)

            for unlock in ["login", "unlock"] {
                try Self.writeOldKeyring(Array(ring.tresors.values), wrappingKey: wrapping, ownerID: me, to: url)
                #expect(throws: ClientError.self) { _ = try Keyring.load(from: url, key: account.localStorageKey, ownerID: me) }
                let unlocked =
                    unlock == "login"
                    ? try await device.accounts.login(username: "kira", password: password)
                    : try await device.accounts.unlock(password: password)
                let migrated = try Keyring.load(from: url, key: unlocked.localStorageKey, ownerID: me)
                #expect(Set(migrated.tresors.keys) == ["interventions", "assessments"], "after \(unlock)")
                #expect(migrated["interventions"]?.keys == ring["interventions"]?.keys, "after \(unlock)")
                #expect(throws: ClientError.self, "after \(unlock) the old key opens nothing") {
                    _ = try Keyring.load(from: url, key: wrapping, ownerID: me)
                }
                let reopened = try PatientVault(account: unlocked, transport: device.transport, adminKey: world.admin.publicKey)
                #expect(try await reopened.activities().map(\.id).sorted() == ["scale", "walk"])
                #expect(!FileManager.default.fileExists(atPath: url.path), "moved into the database when the vault opened")
                #expect(KeyringMoveTests.keys(await reopened.keyring) == KeyringMoveTests.keys(ring))
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

    @Test func aDatabaseEditedToWeakerOrOtherParametersIsRefusedBeforeALoginKeyIsSent() async throws {
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
                try await world.repository.databaseOperator.editRegistration(of: "wes", replacing: pairs)
            }
            func refusal(_ expected: String) async throws {
                let error = await #expect(throws: ClientError.self) { _ = try await accounts.login(username: "wes", password: "strong-pass-1") }
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
            #expect(try await device.accounts.unlock(password: nfd).identity.signing.publicKey == account.identity.signing.publicKey)
            await #expect(throws: ClientError.self) { _ = try await device.accounts.unlock(password: "cafe-pass-1") }

            // An account registered before normalisation, from the raw NFD bytes, still logs in and unlocks.
            let legacy = try world.device("b")
            let identity = Identity.generate()
            let salt = Salt.random()
            let raw = try await PasswordKeys.derive(password: nfd, salt: salt, parameters: .interactive, form: .raw)
            #expect(raw.wrappingKey != (try await PasswordKeys.derive(password: nfd, salt: salt, parameters: .interactive).wrappingKey))
            let request = try RegistrationRequest.make(
                identity: identity,
                username: "leon",
                role: .patient,
                passwordKeys: raw,
                kdf: .interactive,
                salt: salt,
                requestedAt: Date().unixMillis
            )
            // A client from before recovery keys sends the bare request, as it did.
            _ = try await legacy.transport.send(Endpoint<RegistrationRequest, RegisterResponse>(.POST, Routes.register), request)
            try await world.approveAll()
            let old = try await legacy.accounts.login(username: "leon", password: nfd)
            #expect(old.identity.signing.publicKey == identity.signing.publicKey)
            #expect(try await legacy.accounts.unlock(password: nfd).identity.box.publicKey == identity.box.publicKey)
            await #expect(throws: ClientError.self) { _ = try await legacy.accounts.unlock(password: "cafe-pass-1") }
        }
    }
}

/// How many login attempts a fake server saw.
final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

/// A server on plain threads offering chosen password-hashing parameters, and counting login attempts.
/// Timed: its tasks run on a thread of their own, and the fake needs no cooperative thread to answer, so
/// other suites deriving keys at the same time cannot slow the answer down.
@Suite("Client: refusing weak password-hashing parameters before any work", .serialized, OnOwnThread())
struct RefusedParametersTests {
    /// Reads one request, body included (so closing the socket never resets a reply), and returns its head.
    static func readRequest(_ fd: Int32) -> String {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            if let end = data.indices.dropLast(3).first(where: { data[$0..<$0 + 4].elementsEqual(Array("\r\n\r\n".utf8)) }) {
                let head = String(decoding: data[..<end], as: UTF8.self)
                let length =
                    head.split(separator: "\r\n").compactMap { line -> Int? in
                        let parts = line.split(separator: ":", maxSplits: 1)
                        guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                        return Int(parts[1].trimmingCharacters(in: .whitespaces))
                    }.first ?? 0
                if data.count >= end + 4 + length { return head }
            }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return "" }
            data += buffer[0..<n]
        }
    }

    /// Answers `/v1/auth/params` with `kdf` and `salt`, and every login with 401.
    static func fake(kdf: String, salt: Salt, logins: Counter) throws -> FakeServer {
        let offer = #"{"kdf":\#(kdf),"salt":"\#(salt.base64URL)"}"#
        let refusal = #"{"error":{"code":"invalid_credentials","message":"wrong username or password"}}"#
        return try FakeServer { server, fd in
            let head = readRequest(fd)
            let isLogin = head.hasPrefix("POST \(Routes.login) ")
            if isLogin { logins.add() }
            let (status, body) = isLogin ? ("401 Unauthorized", refusal) : ("200 OK", offer)
            server.write(
                fd,
                "HTTP/1.1 \(status)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            )
        }
    }

    static func kdf(_ ops: UInt64, _ mem: UInt64) -> String { #"{"algorithm":"argon2id13","opsLimit":\#(ops),"memLimitBytes":\#(mem)}"# }

    /// Logs in as `username` against `server` from `home`; the error and how many Argon2id derivations the
    /// attempt ran (counted in this task only: the suites beside it derive keys too).
    static func login(_ server: FakeServer, home: URL, username: String) async -> (ClientError?, derivations: Int) {
        let url = "http://127.0.0.1:\(server.port)"
        let runs = PasswordHasher.RunCount()
        do {
            let config = ClientConfiguration(server: url, home: Home(url: home), adminKey: SigningKeyPair.generate().publicKey)
            let accounts = AccountManager(configuration: config, transport: try Transport(baseURL: url, maxAttempts: 1))
            _ = try await PasswordHasher.$runs.withValue(runs) {
                try await accounts.login(username: username, password: "any-password")
            }
            return (nil, runs.value)
        } catch {
            return (error as? ClientError, runs.value)
        }
    }

    static func integrityMessage(_ error: ClientError?) -> String {
        guard case let .integrity(message)? = error else { return "not an integrity failure: \(String(describing: error))" }
        return message
    }

    @Test func weakerParametersThanTheStoredProfileAreRefusedBeforeAnyDerivation() async throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-kdf-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let logins = Counter()
        let salt = Salt.random()
        let moderate = KDFParameters.moderate
        let interactive = KDFParameters.interactive
        for (offered, offeredSalt, expected) in [
            (Self.kdf(interactive.opsLimit, interactive.memLimitBytes), salt, "weaker password-hashing parameters for 'wes'"),
            (Self.kdf(moderate.opsLimit, interactive.memLimitBytes), salt, "weaker password-hashing parameters for 'wes'"),
            (Self.kdf(moderate.opsLimit, moderate.memLimitBytes), Salt.random(), "differ from what this device stored"),
        ] {
            let server = try Self.fake(kdf: offered, salt: offeredSalt, logins: logins)
            defer { server.stop() }
            // This device registered 'wes' under MODERATE: a profile as registration leaves it (the key
            // bundle's contents do not matter, the refusal comes first).
            let identity = Identity.generate()
            let bundle = KeyBundle.seal(identity, wrappingKey: .generate(), kdf: moderate, salt: salt)
            let url = "http://127.0.0.1:\(server.port)"
            let profile = Profile(
                server: url,
                username: "wes",
                userID: identity.userID,
                role: .patient,
                deviceID: "dev-test",
                certificate: nil,
                keyBundle: bundle
            )
            try Home(url: home).store(server: url, username: "wes").save(profile)
            let (error, derivations) = await Self.login(server, home: home, username: "wes")
            #expect(Self.integrityMessage(error).contains(expected), "\(Self.integrityMessage(error))")
            #expect(derivations == 0, "refused before any Argon2id work")
            #expect(logins.value == 0, "no login key was sent")
        }
        #expect(logins.value == 0)
    }

    @Test func withoutAProfileParametersBelowTheFloorAreRefusedBeforeAnyDerivation() async throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-kdf-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let logins = Counter()
        let weak = try Self.fake(kdf: Self.kdf(1, 8_192), salt: Salt.random(), logins: logins)
        defer { weak.stop() }
        let (error, derivations) = await Self.login(weak, home: home, username: "nobody")
        let message = Self.integrityMessage(error)
        #expect(message.contains("unacceptable password-hashing parameters") && message.contains("below the floor"), "\(message)")
        #expect(derivations == 0, "refused before any Argon2id work")
        #expect(logins.value == 0, "no login key was sent")

        // The control: at the floor the client derives and tries to log in, which the fake counts.
        let floor = try Self.fake(
            kdf: Self.kdf(KDFParameters.interactive.opsLimit, KDFParameters.interactive.memLimitBytes),
            salt: .random(),
            logins: logins
        )
        defer { floor.stop() }
        let (refused, derived) = await Self.login(floor, home: home, username: "nobody")
        #expect(refused == ClientError.notPermitted(code: .invalidCredentials, "wrong username or password"))
        #expect(logins.value == 1)
        #expect(derived == 1, "the count sees the derivation a login makes")
    }
}
