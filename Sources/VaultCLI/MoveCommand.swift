import ArgumentParser
import Foundation
import VaultClient
import VaultCore

/// `account move --to URL`, shared by the patient and doctor tools: this device's profile follows the
/// service to a new address of the same deployment (Docs/operations.md, "Moving the service to a new address").
public struct MoveCommand<R: ToolRole>: AsyncParsableCommand {
    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "move",
            abstract: "Move this device's login and data to a new address of the same service.",
            discussion: """
                --server (or CAREVAULT_SERVER) names the address you logged in at, --to the new one. Run it only for an address \
                your operator announced. First, sending no session or password, the new address must give the deployment id the \
                old one gives (when the old one still answers) and this account's password-hashing parameters and salt as this \
                device stored them: that catches a mistyped address or another service. Then this device's session goes to the \
                new address, which must serve this account's certificate; when it refuses the session, the password's login key \
                goes there instead (the password from a prompt, --password-stdin or CAREVAULT_PASSWORD). None of this proves the \
                new address is not an impostor passing requests on to the real service: the deployment id, the parameters and \
                the certificate are public. Nothing on this device changes before these checks pass. Everything this device keeps \
                moves with it (the session, a remembered key, the records or cache and what this device accepted before), so the \
                same checks hold at the new address, and the old address then has no profile here. Stop 'watch', 'sync --watch' \
                and 'dashboard' first. Exit 65 when the new address gives another deployment id, other parameters or salt, or \
                another account or certificate; 64 when this device has no profile for --server or already has one of this \
                account for --to, or a password is needed and none was given; 69 when the new address cannot be reached; 77 when the \
                profile waits for approval, belongs to the other tool or the login is refused; 1 when the new address lacks a \
                route this tool needs or a file cannot be written (nothing moved); 75 and 78 as for every command.
                Example: \(R.tool) account move --server https://127.0.0.1:18443 --to https://care.example
                """
        )
    }
    @Option(help: ArgumentHelp("The new address of the same service.", valueName: "url")) var to: String
    @OptionGroup var options: GlobalOptions
    public init() {}

    public func run() async throws {
        let old = options.serverURL
        guard let store = try options.resolvedHome.current(server: old), let profile = try store.loadProfile() else {
            throw CLIError.usage(
                "this device has no profile for \(old)",
                hint: "--server (or CAREVAULT_SERVER) names the address you logged in at, --to the new one"
            )
        }
        guard profile.role == R.role else {
            throw CLIError(
                "the profile for \(old) is a \(profile.role.rawValue)'s account",
                hint: "use carevault-\(profile.role.rawValue)",
                status: .notPermitted
            )
        }
        let target = try options.transport(to: to)
        let moved = try await options.accounts().moveProfile(
            to: to,
            through: target,
            password: {
                do { return try options.password() } catch let e as CLIError where e.status == .usage {
                    throw CLIError.usage(
                        "\(to) did not accept this device's session (or there is none), so the move logs in there: a password is needed",
                        hint: e.hint
                    )
                }
            },
            deviceName: options.deviceName
        )
        let asked = moved.check == .session ? "accepted this device's session" : "accepted a login with the password"
        let compared =
            moved.deployment == .same
            ? "gave \(moved.from)'s deployment id and this account's password-hashing parameters"
            : "gave this account's password-hashing parameters (\(moved.from) did not answer, so the deployment ids were not compared)"
        if options.json {
            try Output.json([
                "status": "moved", "username": moved.username, "from": moved.from, "to": moved.to, "checkedBy": moved.check.rawValue,
                "deployment": moved.deployment.rawValue, "rememberedKey": moved.remembered ? "resealed" : "none",
            ])
        } else {
            let key = moved.remembered ? "; the remembered key now opens for the new address" : ""
            Output.line(
                "moved \(moved.username) from \(moved.from) to \(moved.to): it \(compared) and \(asked), which rules out a mistyped "
                    + "address or another service, not an impostor passing requests on\(key); nothing is kept for \(moved.from) on this device"
            )
        }
    }
}
