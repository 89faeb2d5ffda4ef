import Foundation
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto

/// The people around one server: the admin (who approves in-process, as `Scripts/approve` would) and
/// devices with their own home folders, talking to the server through the real client SDK. The same
/// wiring as Tests/VaultClientTests/ClientHarness.swift.
struct BenchWorld: Sendable {
    let baseURL: String
    let admin: SigningKeyPair
    let root: URL

    init(server: BenchServer, admin: SigningKeyPair, root: URL) {
        self.init(baseURL: server.baseURL, admin: admin, root: root)
    }

    init(baseURL: String, admin: SigningKeyPair, root: URL) {
        self.baseURL = baseURL
        self.admin = admin
        self.root = root
    }

    static let password = "bench-password-1"

    /// A device: its own home folder and transport (no retries: a failure must show, not be smoothed over).
    func device(_ name: String, kdf: KDFParameters = .interactive) throws -> (AccountManager, Transport) {
        let transport = try Transport(baseURL: baseURL, maxAttempts: 1)
        let config = ClientConfiguration(server: baseURL, home: Home(url: root.appendingPathComponent(name)), adminKey: admin.publicKey, kdf: kdf)
        return (AccountManager(configuration: config, transport: transport), transport)
    }

    /// Approves every pending registration and share with admin-signed requests (no retries either).
    func approveAll() async throws {
        try await AdminClient(baseURL: baseURL, key: admin, maxAttempts: 1).approveAll()
    }

    /// Registers `username` as `role` on a new device, has the admin approve it, and logs in.
    /// With `remember`, the device keeps its key (as `login --remember` does), so the tools unlock it
    /// without the password's Argon2id.
    func account(
        _ username: String,
        role: Role,
        kdf: KDFParameters = .interactive,
        remember: Bool = false
    ) async throws -> (UnlockedAccount, Transport) {
        let (accounts, transport) = try device(username, kdf: kdf)
        _ = try await accounts.register(username: username, password: Self.password, role: role)
        try await approveAll()
        return (try await accounts.login(username: username, password: Self.password, remember: remember), transport)
    }

    func patient(_ username: String) async throws -> PatientVault {
        let (account, transport) = try await account(username, role: .patient)
        return try PatientVault(account: account, transport: transport, adminKey: admin.publicKey)
    }

    func doctor(_ username: String, remember: Bool = false) async throws -> DoctorReader {
        let (account, transport) = try await account(username, role: .doctor, remember: remember)
        return try DoctorReader(account: account, transport: transport, adminKey: admin.publicKey)
    }
}

/// A short random suffix for names (usernames, databases, folders).
func shortID() -> String { Hex.encode(RandomBytes.bytes(count: 4)) }

/// Runs `body` with `resource` and always runs `release` on it afterwards, whether `body` threw or not
/// (an async `defer` does not exist, and every benchmark owns servers, clients or databases to close).
func using<Resource, T: Sendable>(
    _ resource: Resource,
    release: (Resource) async -> Void,
    _ body: (Resource) async throws -> T
) async throws -> T {
    do {
        let value = try await body(resource)
        await release(resource)
        return value
    } catch {
        await release(resource)
        throw error
    }
}
