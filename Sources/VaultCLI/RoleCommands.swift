import ArgumentParser
import Foundation
import VaultClient
import VaultCore

/// The words a tool uses in the account commands it shares with the other tool.
struct AccountWording: Sendable {
    /// The username of the examples.
    let exampleUsername: String
    /// The one-line help of `register`.
    let registerAbstract: String
    /// The help of `register --username`.
    let usernameHelp: String
    /// What `register` says after "registered NAME (pending); ".
    let registeredNote: String
    /// The one-line help of `login`.
    let loginAbstract: String
    /// What the `login` example passes besides the username.
    let loginExampleFlags: String
    /// The help of `login --remember`.
    let rememberHelp: String

    static let patient = AccountWording(
        exampleUsername: "alice",
        registerAbstract: "Create an account; it is pending until the admin approves it.",
        usernameHelp: "Your username: 3-32 characters of a-z, 0-9, '.', '_', '-'.",
        registeredNote: "the admin must approve the account before you can log in",
        loginAbstract: "Log in on this device (also a new one): fetches and unlocks your keys.",
        loginExampleFlags: " --remember",
        rememberHelp:
            "Keep a random device key and a copy of your keys sealed under it (0600 files) so later commands need no password; logout erases both."
    )

    static let doctor = AccountWording(
        exampleUsername: "drbob",
        registerAbstract: "Create a doctor account; pending until the admin approves it.",
        usernameHelp: "Your username.",
        registeredNote: "the admin must approve the account",
        loginAbstract: "Log in on this device.",
        loginExampleFlags: "",
        rememberHelp: "Keep a random device key and your keys sealed under it (0600 files); logout erases both."
    )

    static func of(_ role: Role) -> AccountWording {
        switch role {
        case .patient: return patient
        case .doctor: return doctor
        }
    }
}

/// A tool's role in the commands the patient's and the doctor's tools share (`register`, `login`):
/// its accounts' role, its wording, and what it does once its user has logged in (Docs/design.md §7).
public protocol ToolRole: Sendable {
    /// The role the tool's accounts have.
    static var role: Role { get }
    /// Work done right after logging in; returns what to add to the "logged in as" line.
    static func afterLogin(_ account: UnlockedAccount, options: GlobalOptions) async throws -> String
}

extension ToolRole {
    /// The tool's command name, e.g. `carevault-patient`.
    public static var tool: String { "carevault-\(role.rawValue)" }
    static var wording: AccountWording { .of(role) }
}

extension GlobalOptions {
    /// Refuses an account of the other role, pointing at that role's tool.
    public func require(_ role: Role, _ account: UnlockedAccount, message: (String) -> String) throws {
        let actual = account.profile.role
        guard actual == role else { throw CLIError(message(actual.rawValue), hint: "use carevault-\(actual.rawValue)", status: .notPermitted) }
    }

    /// Unlocks the current account, which must have `role`.
    public func unlock(as role: Role) async throws -> UnlockedAccount {
        let account = try await unlock()
        try require(role, account) { "the account '\(Output.printable(account.profile.username))' is a \($0)" }
        return account
    }
}

/// `register`, shared by the patient and doctor tools: a new account, pending until the admin approves it.
public struct RegisterCommand<R: ToolRole>: AsyncParsableCommand {
    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "register",
            abstract: R.wording.registerAbstract,
            discussion: "Example: \(R.tool) register --username \(R.wording.exampleUsername)"
        )
    }
    @Option(help: ArgumentHelp(R.wording.usernameHelp)) var username: String
    @OptionGroup var options: GlobalOptions
    public init() {}

    public func run() async throws {
        // Checked here so the refusal can echo the name neutralised (the library's message quotes it raw).
        do { _ = try Username.normalize(username) } catch { throw CLIError.usage(Output.printable("\(error)")) }
        let accounts = try options.accounts()
        let registration = try await accounts.registerWithRecovery(
            username: username,
            password: try options.password(prompt: "Choose a password (8+ characters): "),
            role: R.role
        )
        let response = registration.response
        // Shown once and stored nowhere: with neither the password nor this key, the account cannot be opened.
        if options.json {
            try Output.json([
                "userID": response.userID.uuidString, "status": response.status.rawValue, "recoveryKey": registration.recoveryKey.text,
                "fingerprint": registration.fingerprint,
            ])
        } else {
            Output.line("registered \(username.lowercased()) (\(response.status.rawValue)); \(R.wording.registeredNote)")
            // The admin sees the same fingerprint when approving: read out and compared, it ties the request to this person.
            Output.line("key fingerprint (read it out to the admin, who compares it before approving): \(registration.fingerprint)")
            Output.line("recovery key (shown once; write it down and keep it away from this device): \(registration.recoveryKey.text)")
            Output.line("without your password or this key, your account and its data cannot be opened again")
        }
    }
}

/// `login`, shared by the patient and doctor tools: on this device or a new one.
public struct LoginCommand<R: ToolRole>: AsyncParsableCommand {
    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "login",
            abstract: R.wording.loginAbstract,
            discussion: "Example: \(R.tool) login --username \(R.wording.exampleUsername)\(R.wording.loginExampleFlags)"
        )
    }
    @Option(help: "Your username.") var username: String
    @Flag(help: ArgumentHelp(R.wording.rememberHelp)) var remember = false
    @OptionGroup var options: GlobalOptions
    public init() {}

    public func run() async throws {
        let account = try await options.accounts().login(
            username: username,
            password: try options.password(),
            remember: remember,
            deviceName: options.deviceName
        )
        try options.require(R.role, account) { "'\(Output.printable(username))' is a \($0)'s account" }
        let suffix = try await R.afterLogin(account, options: options)
        if options.json {
            try Output.json(["username": account.profile.username, "userID": account.profile.userID.uuidString, "role": R.role.rawValue])
        } else {
            Output.line("logged in as \(account.profile.username) (\(R.role.rawValue)) at \(options.serverURL)\(suffix)")
        }
    }
}

/// `account recover` and `account move` (both tools) and, for patients, `account delete`.
public struct AccountCommand<R: ToolRole>: AsyncParsableCommand {
    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "account",
            abstract: R.role == .patient
                ? "Recover, move or delete your account, or replace its recovery key."
                : "Recover or move your account, or replace its recovery key.",
            subcommands: R.role == .patient
                ? [RecoverCommand.self, RecoveryKeyCommand.self, MoveCommand<R>.self, DeleteAccountCommand.self]
                : [RecoverCommand.self, RecoveryKeyCommand.self, MoveCommand<R>.self]
        )
    }
    public init() {}
}

/// `account delete` (patients): every record, tresor and share on the server, and this device's copies.
public struct DeleteAccountCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete your account: your records, categories and shares on the server and the copies on this device.",
        discussion: """
            Asks for your password (a session alone cannot delete the account), or with --recovery-key for the recovery key.
            Example: carevault-patient account delete --yes
            """
    )
    @Flag(help: "Do not ask; delete at once.") var yes = false
    @Flag(
        name: .customLong("recovery-key"),
        help: "Prove it with the recovery key (env CAREVAULT_RECOVERY_KEY, else a prompt) instead of the password."
    )
    var recoveryKey = false
    @OptionGroup var options: GlobalOptions
    public init() {}

    public func run() async throws {
        let manager = try options.accounts()
        let proof: AccountProof
        let account: UnlockedAccount
        if recoveryKey {
            proof = .recoveryKey(try options.recoveryKey())
            account = try await options.unlock()
        } else {
            let password = try options.password(prompt: "Password (to confirm the deletion): ")
            proof = .password(password)
            account = try await manager.unlockRemembered(orPassword: password)
        }
        try options.require(.patient, account) { "the account '\(Output.printable(account.profile.username))' is a \($0)" }
        let name = account.profile.username
        if !yes {
            guard isatty(STDIN_FILENO) == 1 else { throw CLIError.usage("deleting needs confirmation", hint: "pass --yes, or run in a terminal") }
            FileHandle.standardError.write(Data("This deletes every record of \(name) for good. Type the username to confirm: ".utf8))
            guard readLine(strippingNewline: true)?.trimmingCharacters(in: .whitespaces).lowercased() == name else {
                throw CLIError("not confirmed; nothing was deleted", status: .notPermitted)
            }
        }
        let d = try await manager.deleteAccount(account, proof: proof)
        if options.json {
            try Output.json(["status": "deleted", "versions": String(d.versions), "tresors": String(d.tresors), "shares": String(d.shares)])
        } else {
            Output.line(
                "deleted \(name): \(d.versions) record versions, \(d.tresors) categories and \(d.shares) shares; this device's copies are erased"
            )
        }
    }
}

/// `account recovery rotate` (both tools): a new recovery key replaces the old one, which stops working.
public struct RecoveryKeyCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "recovery",
        abstract: "Manage your recovery key.",
        subcommands: [Rotate.self]
    )
    public init() {}

    /// Makes a new recovery key, prints it once, and makes the old one useless.
    public struct Rotate: AsyncParsableCommand {
        public static let configuration = CommandConfiguration(
            commandName: "rotate",
            abstract: "Replace your recovery key: the new one is printed once, the old one stops working at once.",
            discussion: """
                Use it when the recovery key may have been seen by someone else. Asks for your password and your current
                recovery key (env CAREVAULT_RECOVERY_KEY, else a prompt): a session, or the password alone, is not enough,
                so someone who learned your password cannot take your way back away. --no-current-key is only for an
                account that has no recovery key yet (registered by an older version).
                Example: carevault-patient account recovery rotate
                """
        )
        @Flag(help: "The account has no recovery key yet: enrol a first one, proven by the password.") var noCurrentKey = false
        @OptionGroup var options: GlobalOptions
        public init() {}

        public func run() async throws {
            let manager = try options.accounts()
            let password = try options.password()
            let account = try await manager.unlockRemembered(orPassword: password)
            let current = noCurrentKey ? nil : try options.recoveryKey()
            let key = try await manager.rotateRecoveryKey(account, password: password, currentRecoveryKey: current)
            // Shown once and stored nowhere, like the key `register` printed.
            if options.json {
                try Output.json(["status": "recovery key replaced", "recoveryKey": key.text])
            } else {
                Output.line("new recovery key (shown once; write it down and keep it away from this device): \(key.text)")
                Output.line("the old recovery key no longer works")
            }
        }
    }
}
