import ArgumentParser
import Foundation
import VaultCLI
import VaultClient
import VaultCore

struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share a category with a doctor, list shares, revoke them.",
        subcommands: [Grant.self, List.self, Revoke.self, Trust.self]
    )

    struct Grant: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Share one category with a doctor (the admin approves it).",
            discussion: "Example: carevault-patient share grant --doctor drbob --category interventions --expires 2027-06-30"
        )
        @Option(help: "The doctor's username.") var doctor: String
        @Option(help: "The category to share.") var category: String
        @Option(help: ArgumentHelp("Last day of the share (YYYY-MM-DD).", valueName: "day")) var expires: Day?
        @OptionGroup var options: GlobalOptions
        func run() async throws {
            let vault = try await openVault(options)
            let until = expires.map { $0.start().addingTimeInterval(86_400) }
            _ = try await vault.sync()
            let share = try await vault.grant(doctor: doctor, category: category, expiresAt: until)
            if options.json {
                try Output.json(share)
            } else {
                Output.line(
                    "requested sharing \(category) with \(share.doctorUsername) (share \(share.shareID.uuidString.lowercased())): "
                        + "\(share.state.rawValue) until the admin approves it; once approved, the keys are delivered at your next sync"
                )
            }
        }
    }

    struct Trust: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Accept a doctor's new key after comparing its fingerprint with the doctor in person or by phone.",
            discussion: """
                This device pins each doctor's key the first time it shares with them; a different key later is refused
                until you confirm it here. Example: carevault-patient share trust --doctor drbob --fingerprint 3935-5d71-…
                """
        )
        @Option(help: "The doctor's username.") var doctor: String
        @Option(help: "The new key fingerprint, as the doctor read it to you.") var fingerprint: String
        @OptionGroup var options: GlobalOptions
        func run() async throws {
            let certificate = try await openVault(options).confirmCertificateChange(username: doctor, fingerprint: fingerprint)
            Output.line("now trusting \(certificate.username)'s key \(certificate.fingerprint)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List your shares and their state.")
        @OptionGroup var options: GlobalOptions
        func run() async throws {
            let shares = try await openVault(options).shares()
            try await Output.show(shares, json: options.json, headers: ["DOCTOR", "CATEGORY", "STATE", "CREATED", "EXPIRES"], empty: "no shares") {
                shares.map {
                    [
                        $0.doctorUsername, $0.category, $0.state.rawValue, Output.date(millis: $0.createdAt),
                        $0.expiresAt.map { Output.date(millis: $0) } ?? "-",
                    ]
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a share at once and rotate the category's key.",
            discussion: "Example: carevault-patient share revoke --doctor drbob --category interventions --reencrypt"
        )
        @Option(help: "The doctor's username.") var doctor: String
        @Option(help: "The category.") var category: String
        @Flag(help: "Also re-encrypt older records under the new key.") var reencrypt = false
        @OptionGroup var options: GlobalOptions
        func run() async throws {
            let revocation = try await openVault(options).revoke(doctor: doctor, category: category, reencrypt: reencrypt)
            if options.json {
                try Output.json(revocation)
                return
            }
            let count = revocation.shares.count == 1 ? "1 share" : "\(revocation.shares.count) shares"
            if revocation.rotated {
                Output.line(
                    "revoked \(category) for \(doctor.lowercased()) (\(count)); new records use a new key (epoch \(revocation.epoch)) the doctor does not have"
                        + (reencrypt ? ", and older records were re-encrypted under it" : "")
                )
            } else {
                Output.line(
                    "revoked \(category) for \(doctor.lowercased()) (\(count)); the key had already changed when the share expired, and the doctor does not have the new one"
                )
            }
        }
    }
}
