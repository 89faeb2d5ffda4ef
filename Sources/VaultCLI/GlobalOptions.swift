import ArgumentParser
import Foundation
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto

/// The options every CareVault tool accepts after its subcommand (Docs/design.md §7), each with its
/// environment variable.
public struct GlobalOptions: ParsableArguments, Sendable {
    @Option(help: ArgumentHelp("Server URL (env CAREVAULT_SERVER; default http://127.0.0.1:8080).", valueName: "url"))
    public var server: String?

    @Option(
        help: ArgumentHelp("Folder for profiles, keyrings and caches, one per device (env CAREVAULT_HOME; default ~/.carevault).", valueName: "dir")
    )
    public var home: String?

    @Option(
        name: .customLong("admin-key"),
        help: ArgumentHelp("The pinned admin public key file (env CAREVAULT_ADMIN_KEY; default HOME/admin.pub).", valueName: "file")
    )
    public var adminKey: String?

    @Flag(help: "Machine-readable JSON on stdout.")
    public var json = false

    @Flag(
        name: .customLong("password-stdin"),
        help: "Read the password from the first line of standard input (else env CAREVAULT_PASSWORD, else a prompt)."
    )
    public var passwordStdin = false

    @Option(
        help: ArgumentHelp(
            "Seconds each server request may take, retries included (env CAREVAULT_TIMEOUT; default 30).",
            valueName: "seconds"
        )
    )
    public var timeout: RequestTimeout?

    @Option(
        name: .customLong("ca-cert"),
        help: ArgumentHelp("Trust only this PEM CA certificate for https, instead of the system's (env CAREVAULT_CA_CERT).", valueName: "file")
    )
    public var caCert: String?

    public init() {}

    /// Checks CAREVAULT_TIMEOUT at parse time (the parser checks --timeout), so a bad value is a usage
    /// error even before any request.
    public func validate() throws {
        do { _ = try requestTimeout() } catch let e as CLIError { throw ValidationError(e.message) }
    }

    var env: [String: String] { ProcessInfo.processInfo.environment }

    /// The server URL after flags and environment.
    public var serverURL: String { server ?? env["CAREVAULT_SERVER"] ?? "http://127.0.0.1:8080" }

    /// The home folder after flags and environment.
    public var resolvedHome: Home { Home.resolve(home) }

    /// The pinned admin public key: --admin-key, CAREVAULT_ADMIN_KEY, or admin.pub in the home folder.
    public func adminPublicKey() throws -> SigningPublicKey {
        let path = adminKey ?? env["CAREVAULT_ADMIN_KEY"] ?? resolvedHome.url.appendingPathComponent("admin.pub").path
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CLIError.usage(
                "cannot read the admin public key at \(path)",
                hint: "pass --admin-key FILE (or set CAREVAULT_ADMIN_KEY) with the deployment's admin.pub"
            )
        }
        do { return try SigningPublicKey(base64URL: text.trimmingCharacters(in: .whitespacesAndNewlines)) } catch {
            throw CLIError.usage(
                "\(path) is not an admin public key",
                hint: "it should hold one line: the base64url key written by 'carevault-admin keygen'"
            )
        }
    }

    public func configuration(kdf: KDFParameters = .moderate) throws -> ClientConfiguration {
        ClientConfiguration(server: serverURL, home: resolvedHome, adminKey: try adminPublicKey(), kdf: kdf)
    }

    public func transport() throws -> Transport { try transport(to: serverURL) }

    /// A transport to `url` with this run's timeout and trust (`--timeout`, `--ca-cert`).
    public func transport(to url: String) throws -> Transport {
        let ca = caCert ?? env["CAREVAULT_CA_CERT"].flatMap { $0.isEmpty ? nil : $0 }
        return try Transport(baseURL: url, timeout: try requestTimeout(), caCertificate: ca)
    }

    /// The time budget of one request: --timeout, then CAREVAULT_TIMEOUT, then 30 s.
    public func requestTimeout() throws -> Duration {
        if let timeout { return timeout.duration }
        guard let text = env["CAREVAULT_TIMEOUT"] else { return Transport.defaultTimeout }
        guard let parsed = RequestTimeout(argument: text) else {
            throw CLIError.usage(
                "CAREVAULT_TIMEOUT must be a number of seconds from 0.1 to 86400, got '\(Output.printable(text))'",
                hint: "for example CAREVAULT_TIMEOUT=60"
            )
        }
        return parsed.duration
    }

    public func accounts() throws -> AccountManager { AccountManager(configuration: try configuration(), transport: try transport()) }

    /// The password: --password-stdin, then CAREVAULT_PASSWORD, then a prompt without echo on a terminal.
    public func password(prompt: String = "Password: ") throws -> String {
        if passwordStdin {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                throw CLIError.usage("--password-stdin was given but standard input is empty")
            }
            return line
        }
        if let p = env["CAREVAULT_PASSWORD"], !p.isEmpty { return p }
        guard isatty(STDIN_FILENO) == 1 else {
            throw CLIError.usage("a password is needed", hint: "use --password-stdin, set CAREVAULT_PASSWORD, or run in a terminal")
        }
        return try Terminal.readSecret(prompt: prompt)
    }

    /// The current account's folder on this server (no admin key needed).
    public func currentStore() throws -> ProfileStore {
        guard let store = try resolvedHome.current(server: serverURL), try store.loadProfile() != nil else {
            throw ClientError.localState("not logged in to \(serverURL); run 'register' or 'login' first")
        }
        return store
    }

    /// Ends the session on the server (best effort) and erases the session, the remembered device key and
    /// its identity copy here.
    public func logout() async throws {
        let store = try currentStore()
        if let session = try store.loadSession() {
            _ = try? await transport().send(AccountEndpoints.logout, auth: .session(session.token))
        }
        store.forgetSecrets()
    }

    /// Unlocks the current account: with the remembered device key if there is one, else the password.
    public func unlock() async throws -> UnlockedAccount {
        let manager = try accounts()
        if let account = try manager.unlockRemembered() { return account }
        return try await manager.unlock(password: try password())
    }
}

/// Terminal helpers: reading a secret without echo, and whether stderr is a terminal.
public enum Terminal {
    public static var stderrIsTerminal: Bool { isatty(STDERR_FILENO) == 1 }

    /// Prompts on stderr and reads a line from stdin with echo turned off (restored afterwards).
    public static func readSecret(prompt: String) throws -> String {
        FileHandle.standardError.write(Data(prompt.utf8))
        var old = termios()
        let haveTerm = tcgetattr(STDIN_FILENO, &old) == 0
        if haveTerm {
            var quiet = old
            quiet.c_lflag &= ~tcflag_t(ECHO)
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet)
        }
        defer {
            if haveTerm { tcsetattr(STDIN_FILENO, TCSAFLUSH, &old) }
            FileHandle.standardError.write(Data("\n".utf8))
        }
        guard let line = readLine(strippingNewline: true), !line.isEmpty else { throw CLIError.usage("no password entered") }
        return line
    }
}
