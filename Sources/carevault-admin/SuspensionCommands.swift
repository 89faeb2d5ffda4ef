import ArgumentParser
import Foundation
import VaultCLI
import VaultClient

/// `suspend USER --reason R`: the account cannot log in or read, its sessions end, its data stays.
struct Suspend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Suspend an account: it cannot log in or read, its sessions end at once, its data stays.",
        discussion: "Example: carevault-admin suspend alice --reason \"reported lost device\""
    )
    @Argument(help: "The username.") var user: String
    @Option(help: "Why; the user sees it when a login is refused.") var reason: String
    @OptionGroup var admin: AdminOptions

    func run() async throws {
        let answer = try await admin.client().suspend(username: user, reason: reason)
        if admin.global.json {
            try Output.json(answer)
        } else {
            Output.line("suspended \(Output.printable(answer.username)); its sessions have ended")
        }
    }
}

/// `reinstate USER`: lifts a suspension.
struct Reinstate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Lift an account's suspension; the user can log in again.",
        discussion: "Example: carevault-admin reinstate alice"
    )
    @Argument(help: "The username.") var user: String
    @OptionGroup var admin: AdminOptions

    func run() async throws {
        let answer = try await admin.client().reinstate(username: user)
        if admin.global.json { try Output.json(answer) } else { Output.line("reinstated \(Output.printable(answer.username))") }
    }
}
