import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient

struct Pending: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List registrations and shares waiting for approval.")
    @OptionGroup var admin: AdminOptions
    func run() async throws {
        let pending = try await admin.client().pending()
        try await Output.show(pending, json: admin.global.json, headers: ["KIND", "ID", "WHO", "WHAT"], empty: "nothing pending") {
            pending.items.map { item in
                switch item {
                case let .registration(r):
                    let what = "\(r.request.role.rawValue), fingerprint \(AdminClient.fingerprint(r.request))"
                    return ["registration", item.id, r.request.username, what]
                case let .share(s):
                    return ["share", item.id, s.patient.username, "\(s.share.category) with \(s.doctor.username)"]
                }
            }
        }
    }
}

struct Approve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Approve pending registrations or shares by id (or username), or all of them.",
        discussion: "Example: carevault-admin approve 3f2a… 9c1b…   or   carevault-admin approve --all"
    )
    @Argument(help: "Ids (user id, username or share id) to approve.") var ids: [String] = []
    @Flag(help: "Approve everything pending.") var all = false
    @OptionGroup var admin: AdminOptions

    func validate() throws {
        if ids.isEmpty && !all { throw ValidationError("name what to approve, or pass --all") }
        if !ids.isEmpty && all { throw ValidationError("give ids or --all, not both") }
    }

    func run() async throws {
        let client = try admin.client()
        let pending = try await client.pending()
        let wanted = Set(ids.map { $0.lowercased() })
        let chosen = { (item: PendingItem) in all || wanted.contains(where: item.isNamed(by:)) }
        // A look-alike of a certified name is said even when nobody is asked (stderr).
        for item in pending.items where chosen(item) {
            if let note = try await Review.ledgerNote(item, client.ledger), note.hasPrefix("WARNING") {
                Output.note("\(Output.printable(item.summary)): \(Output.printable(note))")
            }
        }
        let results = await client.approveEach(of: pending, where: chosen)
        var approved: [String] = []
        for result in results {
            if let error = result.error {
                Output.note("carevault-admin: error: \(result.item.summary): \(Output.plain(error))")
            } else {
                approved.append(result.item.summary)
            }
        }
        let failures = results.count - approved.count
        if admin.global.json {
            try Output.json(["approved": approved])
        } else {
            for a in approved { Output.line("approved \(a)") }
            if approved.isEmpty && failures == 0 { print("nothing to approve") }
        }
        if failures > 0 { throw CLIError("\(failures) approvals failed") }
        if !all, approved.count < wanted.count { throw ClientError.notFound("some ids are not pending") }
    }
}

struct Reject: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Reject a pending registration or share with a reason.",
        discussion: "Example: carevault-admin reject 3f2a… --reason \"unknown person\""
    )
    @Argument(help: "The user id, username or share id.") var id: String
    @Option(help: "Why (shown to the user).") var reason: String
    @OptionGroup var admin: AdminOptions
    func run() async throws {
        try await admin.client().reject(id: id, reason: reason)
        if admin.global.json { try Output.json(["rejected": id]) } else { Output.line("rejected \(id)") }
    }
}

struct Review: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Go through everything pending and approve or reject each item (y/n), or all with --yes.",
        discussion: "Scripts/approve runs this. Example: carevault-admin review --admin-secret admin.key"
    )
    @Flag(help: "Approve everything pending without asking.") var yes = false
    @OptionGroup var admin: AdminOptions

    static let defaultReason = "rejected by the admin"

    /// What the ledger says about a registration's name or id: a person approving should know when a name
    /// was certified before, and approving a different key under it is refused anyway.
    static func ledgerNote(_ item: PendingItem, _ ledger: CertificateLedger?) async throws -> String? {
        guard case let .registration(r) = item, let ledger else { return nil }
        guard let e = await ledger.entry(username: r.request.username, userID: r.request.userID) else {
            return await ledger.firstCertificateNote(username: r.request.username)
        }
        let same = e.username == r.request.username && e.userID == r.request.userID && e.fingerprint == AdminClient.fingerprint(r.request)
        return same
            ? "certified before with this same key (\(e.fingerprint))"
            : "WARNING: '\(e.username)' was certified before with id \(e.userID.uuidString.lowercased()) and key \(e.fingerprint); "
                + "approving this one will be refused"
    }

    func ask(_ question: String) -> String {
        FileHandle.standardError.write(Data(question.utf8))
        return (readLine() ?? "").trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// y, n or s: with --yes always y; without a terminal an empty answer skips instead of asking forever.
    func answer(for item: PendingItem, note: String?) -> String {
        if yes, let note, note.hasPrefix("WARNING") { Output.note("\(Output.printable(item.summary)): \(Output.printable(note))") }
        var answer = yes ? "y" : ""
        while !["y", "n", "s"].contains(answer) {
            let seen = note.map { "\n  \(Output.printable($0))" } ?? ""
            answer = ask("\(Output.printable(item.summary))\(seen)\n  approve? [y]es / [n]o (reject) / [s]kip: ")
            if answer.isEmpty, isatty(STDIN_FILENO) == 0 { answer = "s" }
        }
        return answer
    }

    func run() async throws {
        let client = try admin.client()
        let pending = try await client.pending()
        let items = pending.items
        if items.isEmpty {
            print("nothing pending")
            return
        }
        var sequence = pending.nextSequence
        var failures = 0
        for item in items {
            let text = item.summary
            do {
                switch answer(for: item, note: try await Self.ledgerNote(item, client.ledger)) {
                case "y":
                    try await client.approve(item, sequence: sequence)
                    sequence = AdminClient.sequence(after: sequence)
                    Output.line("approved \(text)")
                case "n":
                    let reason = yes ? Self.defaultReason : ask("  reason: ")
                    try await client.reject(id: item.id, reason: reason.isEmpty ? Self.defaultReason : reason, pending: pending)
                    Output.line("rejected \(text)")
                default:
                    Output.line("skipped \(text)")
                }
            } catch {
                failures += 1
                Output.note("carevault-admin: error: \(text): \(Output.plain(error))")
            }
        }
        if failures > 0 { throw CLIError("\(failures) of \(items.count) items failed") }
    }
}
