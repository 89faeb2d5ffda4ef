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
                --server (or CAREVAULT_SERVER) names the address you logged in at, --to the new one. Before anything here changes, \
                the new address must serve this same account: the same user id, role and certificate, checked under the pinned \
                admin key. It is asked with this device's session, or, when that has ended or is not accepted there, with a login \
                (the password from a prompt, --password-stdin or CAREVAULT_PASSWORD). Everything this device keeps moves with it: \
                the session, a remembered key, the records or cache and what this device accepted before, so the same checks hold \
                at the new address. The old address then has no profile on this device. Stop 'watch', 'sync --watch' and \
                'dashboard' first. Exit 65 when the new address serves another account or certificate; 64 when this device has \
                no profile for --server, or already has one of this account for --to.
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
                        "\(to) did not accept this device's session (or there is none), so a login there must show it serves this account: "
                            + "a password is needed",
                        hint: e.hint
                    )
                }
            },
            deviceName: options.deviceName
        )
        let checked = moved.check == .session ? "with this device's session" : "with a login"
        if options.json {
            try Output.json([
                "status": "moved", "username": moved.username, "from": moved.from, "to": moved.to, "checkedBy": moved.check.rawValue,
                "rememberedKey": moved.remembered ? "resealed" : "none",
            ])
        } else {
            let key = moved.remembered ? "; the remembered key now opens for the new address" : ""
            Output.line(
                "moved \(moved.username) from \(moved.from) to \(moved.to) (same account and certificate, checked \(checked))\(key); "
                    + "nothing is kept for \(moved.from) on this device"
            )
        }
    }
}
