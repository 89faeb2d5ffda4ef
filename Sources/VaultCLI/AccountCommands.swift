import ArgumentParser
import Foundation
import VaultClient
import VaultCore

/// `logout`, shared by the patient and doctor tools.
public struct LogoutCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "End the session and erase the remembered device key and key copy."
    )
    @OptionGroup var options: GlobalOptions
    public init() {}

    public func run() async throws {
        try await options.logout()
        if options.json { try Output.json(["status": "logged out"]) } else { print("logged out") }
    }
}

/// `whoami`, shared by the patient and doctor tools: the current account on this device.
public struct WhoAmICommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "whoami", abstract: "Show the current account on this device.")
    @OptionGroup var options: GlobalOptions
    public init() {}

    public func run() async throws {
        let store = try options.currentStore()
        guard let p = try store.loadProfile() else { throw ClientError.localState("not logged in") }
        let session = try store.loadSession()
        let info: [String: String] = [
            "username": p.username, "role": p.role.rawValue, "userID": p.userID.uuidString, "server": p.server, "device": p.deviceID,
            "fingerprint": p.certificate?.fingerprint ?? "pending approval",
            "session": session.map { $0.expiresAt > Date().unixMillis ? "valid until \(Output.date(millis: $0.expiresAt))" : "expired" } ?? "none",
        ]
        if options.json {
            try Output.json(info)
            return
        }
        for k in ["username", "role", "userID", "server", "device", "fingerprint", "session"] {
            Output.line("\(k.padding(toLength: 12, withPad: " ", startingAt: 0)) \(info[k]!)")
        }
    }
}

// MARK: The account lifecycle (Docs/design.md §2, §7)

extension GlobalOptions {
    /// The new password: --new-password-stdin (the next line of standard input), then
    /// CAREVAULT_NEW_PASSWORD, then a prompt asked twice on a terminal.
    func newPassword(fromStdin: Bool) throws -> String {
        if fromStdin {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                throw CLIError.usage("--new-password-stdin was given but standard input has no line for it")
            }
            return line
        }
        if let p = env["CAREVAULT_NEW_PASSWORD"], !p.isEmpty { return p }
        guard isatty(STDIN_FILENO) == 1 else {
            throw CLIError.usage("a new password is needed", hint: "use --new-password-stdin, set CAREVAULT_NEW_PASSWORD, or run in a terminal")
        }
        let first = try Terminal.readSecret(prompt: "New password (8+ characters): ")
        guard try Terminal.readSecret(prompt: "New password again: ") == first else { throw CLIError.usage("the two new passwords differ") }
        return first
    }

    /// The recovery key: CAREVAULT_RECOVERY_KEY, else a prompt without echo.
    func recoveryKey() throws -> RecoveryKey {
        let text: String
        if let k = env["CAREVAULT_RECOVERY_KEY"], !k.isEmpty {
            text = k
        } else {
            guard isatty(STDIN_FILENO) == 1 else {
                throw CLIError.usage("a recovery key is needed", hint: "set CAREVAULT_RECOVERY_KEY or run in a terminal")
            }
            text = try Terminal.readSecret(prompt: "Recovery key: ")
        }
        do { return try RecoveryKey(text: text) } catch let e as ClientError { throw CLIError.usage(e.description) }
    }

    /// This device's name for the session list: the host name.
    var deviceName: String { String(ProcessInfo.processInfo.hostName.prefix(64)) }
}

/// `password change`, shared by the patient and doctor tools.
public struct PasswordCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(commandName: "password", abstract: "Change your password.", subcommands: [Change.self])
    public init() {}

    /// Re-wraps the keys under a new password; every other session ends and the server refuses the old one.
    public struct Change: AsyncParsableCommand {
        public static let configuration = CommandConfiguration(
            commandName: "change",
            abstract: "Change the password: your keys are re-wrapped under it and every other session ends.",
            discussion: """
                Example: carevault-patient password change   (asks for the current password, then the new one twice)
                The server refuses the old password at once. Your keys stay the same: a device that has not logged in since
                still opens its local copy with the old password until it next logs in (Docs/envelope-v1.md §2.4).
                """
        )
        @Flag(
            name: .customLong("new-password-stdin"),
            help: "Read the new password from the next line of standard input (else env CAREVAULT_NEW_PASSWORD, else a prompt)."
        )
        var newPasswordStdin = false
        @OptionGroup var options: GlobalOptions
        public init() {}

        public func run() async throws {
            let current = try options.password(prompt: "Current password: ")
            let manager = try options.accounts()
            let account = try await manager.unlockRemembered(orPassword: current)
            let new = try options.newPassword(fromStdin: newPasswordStdin)
            try await manager.changePassword(account, current: current, new: new)
            if options.json {
                try Output.json(["status": "password changed"])
            } else {
                Output.line("password changed; every other session has ended")
            }
        }
    }
}

/// `account recover`, shared by the patient and doctor tools.
public struct RecoverCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Set a new password with the recovery key shown at registration; every session ends.",
        discussion:
            "Example: carevault-patient account recover --username alice (asks for the recovery key without echo; CAREVAULT_RECOVERY_KEY is read when set, for scripts)"
    )
    @Option(help: "Your username.") var username: String
    @Flag(name: .customLong("new-password-stdin"), help: "Read the new password from the first line of standard input.")
    var newPasswordStdin = false
    @OptionGroup var options: GlobalOptions
    public init() {}

    public func run() async throws {
        let key = try options.recoveryKey()
        let new = try options.newPassword(fromStdin: newPasswordStdin)
        let account = try await options.accounts().recover(username: username, recoveryKey: key, newPassword: new)
        if options.json {
            try Output.json(["status": "recovered", "username": account.profile.username])
        } else {
            Output.line("new password set for \(account.profile.username); every other session has ended and this device is logged in")
        }
    }
}

/// `sessions` (list) and `sessions revoke ID|--all`, shared by the patient and doctor tools.
public struct SessionsCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "sessions",
        abstract: "List this account's sessions, or end one.",
        subcommands: [List.self, Revoke.self],
        defaultSubcommand: List.self
    )
    public init() {}

    /// Lists the sessions; the current one is marked.
    public struct List: AsyncParsableCommand {
        public static let configuration = CommandConfiguration(commandName: "list", abstract: "List this account's sessions.")
        @OptionGroup var options: GlobalOptions
        public init() {}

        public func run() async throws {
            let manager = try options.accounts()
            let sessions = try await manager.sessions(try await options.unlock())
            try await Output.show(sessions, json: options.json, headers: ["ID", "DEVICE", "CREATED", "LAST USED", ""], empty: "no sessions") {
                sessions.map {
                    [
                        $0.id, Output.printable($0.deviceName ?? "-"), Output.date(millis: $0.createdAt),
                        $0.lastUsedAt.map { Output.date(millis: $0) } ?? "-", $0.current ? "(this device)" : "",
                    ]
                }
            }
        }
    }

    /// Ends one session, or every other one.
    public struct Revoke: AsyncParsableCommand {
        public static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "End a session at once (by the id 'sessions' lists), or with --all every session but this one.",
            discussion: "Example: carevault-patient sessions revoke 3f2a9c0d1e4b5a69"
        )
        @Argument(help: "The session id.") var id: String?
        @Flag(help: "End every session except this device's.") var all = false
        @OptionGroup var options: GlobalOptions
        public init() {}

        public func validate() throws {
            guard (id == nil) != !all else { throw ValidationError("give a session id or --all, not both") }
        }

        public func run() async throws {
            let manager = try options.accounts()
            let n = try await manager.revokeSessions(try await options.unlock(), id: all ? nil : id)
            if options.json { try Output.json(["revoked": n]) } else { Output.line("ended \(n) session\(n == 1 ? "" : "s")") }
        }
    }
}
