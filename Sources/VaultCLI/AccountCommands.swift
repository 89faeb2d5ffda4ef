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
