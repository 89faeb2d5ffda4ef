import ArgumentParser
import Foundation
import Hummingbird
import Logging
import VaultCrypto
import VaultServer

/// `carevault-server`: the ciphertext document store (Docs/design.md §6 and §7).
@main
struct CareVaultServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "carevault-server",
        abstract: "Run the CareVault server: stores only ciphertext, routes shares, keeps the audit log.",
        discussion: """
            The server never sees health data or tresor keys. It is configured with the admin's public key,
            which it uses to verify approvals and signed admin requests.

            Example:
              carevault-server --admin-key Keys/admin.pub --database sqlite:data/carevault.sqlite --port 8080
            """
    )

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0 picks a free one).")
    var port = 8080

    @Option(
        help: ArgumentHelp(
            "Database URL: sqlite:PATH or postgres://user:password@host:port/database (env CAREVAULT_DATABASE_URL).",
            valueName: "url"
        )
    )
    var database: String?

    @Option(name: .customLong("admin-key"), help: ArgumentHelp("The pinned admin public key file (env CAREVAULT_ADMIN_KEY).", valueName: "file"))
    var adminKey: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("unknown log level '\(logLevel)'") }
        guard (0...65_535).contains(port) else { throw ValidationError("port must be 0...65535") }
    }

    func run() async throws {
        let env = ProcessInfo.processInfo.environment
        guard let keyPath = adminKey ?? env["CAREVAULT_ADMIN_KEY"] else {
            throw ValidationError("the admin public key is required: --admin-key FILE (create one with carevault-admin keygen)")
        }
        let text: String
        do { text = try String(contentsOfFile: keyPath, encoding: .utf8) } catch {
            throw ValidationError("cannot read admin key file '\(keyPath)'")
        }
        let key: SigningPublicKey
        do { key = try SigningPublicKey(base64URL: text.trimmingCharacters(in: .whitespacesAndNewlines)) } catch {
            throw ValidationError("'\(keyPath)' is not an admin public key (expected base64url of 32 bytes)")
        }
        let databaseURL = database ?? env["CAREVAULT_DATABASE_URL"] ?? "sqlite:data/carevault.sqlite"
        let config = ServerConfiguration(
            host: host,
            port: port,
            databaseURL: databaseURL,
            adminKey: key,
            logLevel: Logger.Level(rawValue: logLevel) ?? .info
        )
        let app = try await buildApplication(config)
        // runService installs SIGTERM and SIGINT handlers and shuts down gracefully.
        try await app.runService()
    }
}
