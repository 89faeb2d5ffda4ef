import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

/// A real server on a free loopback port over a fresh database, and devices (separate home folders)
/// that talk to it through the real client SDK.
struct ClientWorld: Sendable {
    let repository: any VaultRepository
    let baseURL: String
    let admin: SigningKeyPair
    let root: URL
    /// The server's audit batcher, when the test made it (`batcher`).
    var auditBatcher: AuditBatcher? = nil

    /// `batcher` makes the server's audit batcher over the test's database, for a test that watches or
    /// breaks its transactions.
    static func run(
        _ backend: Backend,
        batcher: (@Sendable (any VaultRepository) -> AuditBatcher)? = nil,
        _ body: @escaping @Sendable (ClientWorld) async throws -> Void
    ) async throws {
        try await TestDatabase.with(backend) { repo in
            let admin = SigningKeyPair.generate()
            let auditBatcher = batcher?(repo)
            let app = Application(
                router: buildRouter(repository: repo, adminKey: admin.publicKey, auditBatcher: auditBatcher),
                configuration: .init(address: .hostname("127.0.0.1", port: 0))
            )
            try await app.test(.live) { client in
                let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-client-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: root) }
                let world = ClientWorld(
                    repository: repo,
                    baseURL: "http://127.0.0.1:\(client.port!)",
                    admin: admin,
                    root: root,
                    auditBatcher: auditBatcher
                )
                try await body(world)
            }
        }
    }

    /// A device: its own home folder and transport.
    func device(_ name: String) throws -> Device {
        let home = Home(url: root.appendingPathComponent(name))
        let config = ClientConfiguration(server: baseURL, home: home, adminKey: admin.publicKey, kdf: .interactive)
        let transport = try Transport(baseURL: baseURL, maxAttempts: 2, baseDelayMs: 10)
        return Device(accounts: AccountManager(configuration: config, transport: transport), transport: transport, admin: admin.publicKey)
    }

    /// The admin, signing in this process as `Scripts/approve` would on the admin's machine.
    var adminClient: AdminClient { get throws { try AdminClient(baseURL: baseURL, key: admin) } }

    /// Approves every pending registration and share, as the admin would.
    func approveAll() async throws {
        try await adminClient.approveAll()
    }

    /// Registers `username` on `device`, approves it, logs in and returns the patient vault.
    func patient(
        _ username: String,
        on device: Device,
        password: String = "password-\(UUID().uuidString.prefix(4))"
    ) async throws -> (PatientVault, String) {
        _ = try await device.accounts.register(username: username, password: password, role: .patient)
        try await approveAll()
        let account = try await device.accounts.login(username: username, password: password)
        return (try PatientVault(account: account, transport: device.transport, adminKey: admin.publicKey), password)
    }

    func doctor(_ username: String, on device: Device, password: String = "doctor-password") async throws -> DoctorReader {
        _ = try await device.accounts.register(username: username, password: password, role: .doctor)
        try await approveAll()
        let account = try await device.accounts.login(username: username, password: password)
        return try DoctorReader(account: account, transport: device.transport, adminKey: admin.publicKey)
    }
}

struct Device: Sendable {
    let accounts: AccountManager
    let transport: Transport
    let admin: SigningPublicKey

    /// Logs in (as on a new device) and opens the patient vault.
    func loginPatient(_ username: String, password: String) async throws -> PatientVault {
        let account = try await accounts.login(username: username, password: password)
        return try PatientVault(account: account, transport: transport, adminKey: admin)
    }
}

enum Sample {
    static let start = Date(unixMillis: 1_767_254_400_000)  // 2026-01-01T08:00:00Z
    static let utc = TimeZone(identifier: "UTC")!

    static func activity(_ id: String, title: String = "Walk", category: String = "interventions") throws -> Activity {
        try Activity(
            id: id,
            title: title,
            category: category,
            schedule: Schedule.dailyAtTimes(start: start, end: nil, times: [DateComponents(hour: 8, minute: 0)], timeZone: utc),
            createdAt: start
        )
    }

    static func value(_ n: Double, at ms: Int64 = 1_767_254_400_000) -> OutcomeValue {
        OutcomeValue(value: .number(n), units: "steps", createdAt: Date(unixMillis: ms))
    }
}
