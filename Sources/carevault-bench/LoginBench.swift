import Foundation
import VaultClient
import VaultCore
import VaultCrypto

/// Login with the default Argon2id parameters (KDFParameters.moderate), a deliberate cost (Docs/benchmarks.md §6):
/// `AccountManager.login` end to end (parameters, Argon2id, proof, key bundle, certificate check),
/// beside Argon2id alone with the same parameters.
struct LoginResult: Sendable {
    var loginMs: [Double]
    var argon2Ms: [Double]
    var medianLoginMs: Double { Measure.median(loginMs) }
    var medianArgon2Ms: Double { Measure.median(argon2Ms) }
}

struct LoginBench {
    let reps: Int
    let root: URL

    func run() async throws -> LoginResult {
        let admin = SigningKeyPair.generate()
        return try await withDatabase(.sqlite, root: root) { db in
            try await withServer(repository: db.repository, adminKey: admin.publicKey) { server in
                let world = BenchWorld(server: server, admin: admin, root: root.appendingPathComponent("login-\(shortID())"))
                defer { try? FileManager.default.removeItem(at: world.root) }
                let name = "login-\(shortID())"
                let (accounts, _) = try world.device(name, kdf: .moderate)
                _ = try await accounts.register(username: name, password: BenchWorld.password, role: .patient)
                try await world.approveAll()
                var result = LoginResult(loginMs: [], argon2Ms: [])
                for _ in 0..<reps {
                    let (account, seconds) = try await Measure.timeAsync { try await accounts.login(username: name, password: BenchWorld.password) }
                    guard account.profile.username == name, account.keyBundleKDF == .moderate else {
                        throw BenchError("login did not use the moderate parameters")
                    }
                    result.loginMs.append(seconds * 1_000)
                    let salt = Salt.random()
                    let (_, kdfSeconds) = try Measure.time {
                        // blocking: raw Argon2id timed on the calling thread, as the ratio beside the login needs
                        try PasswordHasher.deriveKey(password: BenchWorld.password, salt: salt, parameters: .moderate)
                    }
                    result.argon2Ms.append(kdfSeconds * 1_000)
                }
                Progress.say(
                    "login (Argon2id \(KDFParameters.moderate)): median \(fmt(result.medianLoginMs, 0)) ms; Argon2id alone \(fmt(result.medianArgon2Ms, 0)) ms"
                )
                return result
            }
        }
    }
}

extension UnlockedAccount {
    /// The Argon2id parameters this account's key bundle was derived with.
    var keyBundleKDF: KDFParameters { profile.keyBundle.kdf }
}
