import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// `carevault-patient`: a patient's care plan, encrypted on this device, synced as ciphertext, shared
/// one category at a time (Docs/design.md §7).
@main
struct CareVaultPatient: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "carevault-patient",
        abstract: "Keep your care plan encrypted, sync it, and share a category with your doctor.",
        discussion: """
        Everything is encrypted on this device before it leaves it. Commands that change data sync at the end unless --offline is given.

        Exit status: 0 ok, 64 usage, 65 integrity failure, 69 server unreachable, 75 retry later, 77 not permitted, 1 other.

        Example:
          carevault-patient register --username alice
          carevault-patient login --username alice
          carevault-patient activity add --id walk --title "Walk 30 minutes" --category interventions --schedule daily@08:00
          carevault-patient outcome record --activity walk --value 4200 --units steps
          carevault-patient share grant --doctor drbob --category interventions
        """,
        subcommands: [Register.self, Login.self, LogoutCommand.self, WhoAmICommand.self, ActivityCommand.self, OutcomeCommand.self, Sync.self,
                      ShareCommand.self, Doctors.self, AccessLog.self]
    )

    static func main() async { await ToolRunner.main(Self.self, tool: "carevault-patient") }
}

/// Opens the vault of the current patient.
func openVault(_ options: GlobalOptions) throws -> PatientVault {
    let account = try options.unlock()
    guard account.profile.role == .patient else {
        throw CLIError("the account '\(account.profile.username)' is a doctor", hint: "use carevault-doctor", status: .notPermitted)
    }
    return try PatientVault(account: account, transport: try options.transport(), adminKey: try options.adminPublicKey())
}

/// Syncs unless `offline`, reporting what happened on stderr.
func syncAfterChange(_ vault: PatientVault, offline: Bool, json: Bool) async throws {
    if offline {
        if !json { Output.note("saved on this device (offline); run 'carevault-patient sync' to send it") }
        return
    }
    let progress = ProgressLine()
    let summary = try await vault.sync(progress: progress.syncCallback)
    progress.finish()
    report(summary, json: false, quiet: json)
    if !summary.rejected.isEmpty {
        throw CLIError("the change was saved here but the server refused it", hint: "see the warning above (a device clock far ahead is the usual cause)")
    }
}

func report(_ s: SyncSummary, json: Bool, quiet: Bool = false) {
    for r in s.rejected { Output.note("carevault-patient: warning: the server refused a version: \(r)") }
    if !quiet { Output.note("synced: \(s.pushed) sent, \(s.pulled) received, \(s.conflictsResolved) conflicts resolved") }
}

struct Register: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create an account; it is pending until the admin approves it.",
                                                    discussion: "Example: carevault-patient register --username alice")
    @Option(help: "Your username: 3-32 characters of a-z, 0-9, '.', '_', '-'.") var username: String
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let password = try options.password(prompt: "Choose a password (8+ characters): ")
        let response = try await options.accounts().register(username: username, password: password, role: .patient)
        if options.json { try Output.json(response) } else {
            print("registered \(username.lowercased()) (\(response.status.rawValue)); the admin must approve the account before you can log in")
        }
    }
}

struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Log in on this device (also a new one): fetches and unlocks your keys.",
                                                    discussion: "Example: carevault-patient login --username alice --remember")
    @Option(help: "Your username.") var username: String
    @Flag(help: "Remember this device's key in a 0600 file so later commands need no password; logout erases it.") var remember = false
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let account = try await options.accounts().login(username: username, password: try options.password(), remember: remember)
        guard account.profile.role == .patient else {
            throw CLIError("'\(username)' is a doctor's account", hint: "use carevault-doctor", status: .notPermitted)
        }
        let vault = try PatientVault(account: account, transport: try options.transport(), adminKey: try options.adminPublicKey())
        let summary = try await vault.sync()
        if options.json { try Output.json(["username": account.profile.username, "userID": account.profile.userID.uuidString, "role": "patient"]) } else {
            print("logged in as \(account.profile.username) (patient) at \(options.serverURL); \(summary.pulled) records synced")
        }
    }
}



struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Send local changes and receive changes from your other devices.")
    @OptionGroup var options: GlobalOptions
    func run() async throws {
        let vault = try openVault(options)
        let progress = ProgressLine()
        let summary = try await vault.sync(progress: progress.syncCallback)
        progress.finish()
        if options.json { try Output.json(summary) } else {
            print("sent \(summary.pushed) (\(summary.duplicates) already there), received \(summary.pulled), resolved \(summary.conflictsResolved) conflicts")
            report(summary, json: false, quiet: true)
        }
        if !summary.rejected.isEmpty { throw CLIError("\(summary.rejected.count) versions were refused by the server", hint: "see the warnings above") }
    }
}

struct Doctors: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the doctors you share with, and what.")
    @OptionGroup var options: GlobalOptions
    func run() async throws {
        let shares = try await openVault(options).shares().filter { $0.state == .active || $0.state == .pending }
        if options.json { try Output.json(shares.map { ["doctor": $0.doctorUsername, "category": $0.category, "state": $0.state.rawValue] }) } else {
            Output.table(["DOCTOR", "CATEGORY", "STATE", "SINCE"], shares.map { [$0.doctorUsername, $0.category, $0.state.rawValue, Output.date(millis: $0.createdAt)] },
                         empty: "you share nothing with any doctor")
        }
    }
}

struct AccessLog: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "access-log", abstract: "Who read your data, and what happened to your account and shares.")
    @OptionGroup var options: GlobalOptions
    func run() async throws {
        let entries = try await openVault(options).accessLog()
        if options.json { try Output.json(entries) } else {
            Output.table(["TIME", "WHAT", "DETAILS"], entries.map { e in
                [Output.date(millis: e.at), e.action, e.details.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")]
            })
        }
    }
}
