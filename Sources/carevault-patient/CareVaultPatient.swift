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

            Exit status: 0 ok, 64 usage, 65 integrity failure, 69 server unreachable, 75 retry later, 77 not permitted, 78 upgrade the tool, 1 other.

            Example:
              carevault-patient register --username alice
              carevault-patient login --username alice
              carevault-patient activity add --id walk --title "Walk 30 minutes" --category interventions --schedule daily@08:00
              carevault-patient outcome record --activity walk --value 4200 --units steps
              carevault-patient share grant --doctor drbob --category interventions
            """,
        version: CareVaultVersion.current,
        subcommands: [
            RegisterCommand<PatientRole>.self, LoginCommand<PatientRole>.self, LogoutCommand.self, WhoAmICommand.self, ActivityCommand.self,
            OutcomeCommand.self, Import.self, Sync.self, ShareCommand.self, Doctors.self, AccessLog.self, PasswordCommand.self,
            AccountCommand<PatientRole>.self, SessionsCommand.self, PatientExport.self, PatientDashboard.self,
        ]
    )

    static func main() async { await ToolRunner.main(Self.self, tool: "carevault-patient") }
}

/// Opens the vault of the current patient.
func openVault(_ options: GlobalOptions) async throws -> PatientVault {
    let account = try await options.unlock(as: .patient)
    return try PatientVault(account: account, transport: try options.transport(), adminKey: try options.adminPublicKey())
}

/// The options of every command that changes data: whether to sync afterwards, then the global ones.
struct ChangeOptions: ParsableArguments {
    @Flag(help: "Do not sync afterwards.") var offline = false
    @OptionGroup var options: GlobalOptions

    var json: Bool { options.json }

    func vault() async throws -> PatientVault { try await openVault(options) }

    /// Syncs unless `offline`, reporting what happened on stderr.
    func sync(_ vault: PatientVault) async throws {
        if offline {
            if !json { Output.note("saved on this device (offline); run 'carevault-patient sync' to send it") }
            return
        }
        let progress = ProgressLine()
        let summary = try await vault.sync(progress: progress.syncCallback)
        progress.finish()
        report(summary, json: false, quiet: json)
        if !summary.rejected.isEmpty {
            throw CLIError(
                "the change was saved here but the server refused it",
                hint: "see the warning above (a device clock far ahead is the usual cause)"
            )
        }
    }
}

func report(_ s: SyncSummary, json: Bool, quiet: Bool = false) {
    // A server behind what this device last saw (a restored backup), and what was re-sent to it (Docs/design.md §5.2).
    for h in s.healed { Output.note("carevault-patient: \(h)") }
    for r in s.rejected { Output.note("carevault-patient: warning: the server refused a version: \(r)") }
    if !quiet {
        Output.note("synced: \(s.pushed) sent, \(s.pulled) received, \(s.conflictsResolved) conflicts resolved")
        if let keys = deliveredText(s) { Output.note(keys) }
    }
}

/// The line that says which approved shares got their keys in a sync, or nil when none did.
func deliveredText(_ s: SyncSummary) -> String? {
    s.keysDelivered.isEmpty ? nil : "delivered the keys of \(s.keysDelivered.joined(separator: ", ")): the doctor can read it now"
}

/// The patient tool's side of `register` and `login`: patients' accounts, and a first sync at login.
enum PatientRole: ToolRole {
    static let role = Role.patient

    static func afterLogin(_ account: UnlockedAccount, options: GlobalOptions) async throws -> String {
        let vault = try PatientVault(account: account, transport: try options.transport(), adminKey: try options.adminPublicKey())
        // Login succeeds whenever the account is fine, whatever the state of the records: records that
        // fail their integrity check are kept aside and named in a warning (Docs/design.md §5).
        let summary = try await vault.syncKeepingQuarantine()
        for h in summary.healed { Output.note("carevault-patient: \(h)") }
        if let warning = summary.quarantineMessage { Output.note("warning: \(warning)") }
        return "; \(summary.pulled) records synced"
    }
}

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send local changes and receive changes from your other devices.",
        discussion: """
            A record from the server that fails its integrity check is kept aside and not applied; the rest is applied and sent, \
            the command ends with exit status 65, and every later sync fetches the kept records again (Docs/design.md §5).
            With --watch it keeps going until SIGINT or SIGTERM (exit 0; 65 if an integrity failure was reported meanwhile;
            77 when the session ends); see "Live updates" in README.md.
            """
    )
    @Flag(help: "List the records kept aside (sequence, record id, reason) on stderr.") var verbose = false
    @Flag(help: "Keep syncing until SIGINT or SIGTERM: remote changes, local ones, keys for approved shares.") var watch = false
    @OptionGroup var options: GlobalOptions
    func run() async throws {
        if watch { return try await SyncWatch(options: options).run() }
        let vault = try await openVault(options)
        let progress = ProgressLine()
        let summary = try await vault.syncKeepingQuarantine(progress: progress.syncCallback)
        progress.finish()
        if options.json {
            try Output.json(summary)
        } else {
            print(
                "sent \(summary.pushed) (\(summary.duplicates) already there), received \(summary.pulled), "
                    + "resolved \(summary.conflictsResolved) conflicts"
            )
            if let keys = deliveredText(summary) { print(keys) }
            report(summary, json: false, quiet: true)
        }
        if verbose {
            for q in summary.quarantined {
                Output.note("kept aside: sequence \(q.sequence), record \(q.recordID ?? "unknown"), \(q.reason.rawValue)")
            }
        }
        if let message = summary.quarantineMessage {
            throw CLIError(message, hint: "everything else was applied and sent; every sync fetches these records again", status: .integrity)
        }
        if !summary.rejected.isEmpty {
            throw CLIError("\(summary.rejected.count) versions were refused by the server", hint: "see the warnings above")
        }
    }
}

struct Doctors: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the doctors you share with, and what.",
        discussion: """
            From your own ledger of shares (kept by your devices and signed by you), not from the server's list:
            active (keys delivered) or requested (waiting for the admin, or for your next sync). Open shares the
            server lists that your ledger does not hold are counted on stderr and not shown.
            """
    )
    @OptionGroup var options: GlobalOptions
    func run() async throws {
        let (doctors, unlisted) = try await openVault(options).doctors()
        if unlisted > 0 {
            Output.note(
                "\(unlisted) more share\(unlisted == 1 ? "" : "s") listed by the server \(unlisted == 1 ? "is" : "are") not in your ledger "
                    + "and not shown (not yours, or made on another device: sync it)"
            )
        }
        let headers = ["DOCTOR", "CATEGORY", "STATE", "SINCE", "EXPIRES"]
        try await Output.show(doctors, json: options.json, headers: headers, empty: "you share nothing with any doctor") {
            doctors.map { [$0.doctor, $0.category, $0.state, Output.date(millis: $0.since), $0.expiresAt.map { Output.date(millis: $0) } ?? "-"] }
        }
    }
}

struct AccessLog: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access-log",
        abstract: "Who read your data, and what happened to your account and shares.",
        discussion: """
            The audit chain's links are checked, and pinned by the newest audit checkpoint signed with the admin
            key: an entry about you removed, changed or no longer tagged with you makes this command fail with
            exit status 65 (after the checkpoint, only while the chain was not rehashed). Entries after it are
            shown as not yet checkpointed; without any checkpoint, every entry is. Docs/design.md §6 lists what
            can and cannot be detected.

            After a check that passes, the next one resumes where it ended: all your entries are downloaded and
            checked against what this device remembers of them, and only the links written since. When the
            server's log does not match what was remembered, the whole chain is checked instead and that
            verdict is reported, with a warning on stderr when the log was rewritten or cut before the point
            the last check reached. After any integrity failure the next checks walk the whole chain until one
            passes. With --full the whole chain is always checked, which also re-checks the links of other
            users' entries before that point.
            """
    )
    @OptionGroup var options: GlobalOptions
    @Flag(help: "Check the whole chain from entry 1, not only the links since the last check.") var full = false
    func run() async throws {
        let vault = try await openVault(options)
        let log = try await vault.verifiedAccessLog(full: full)
        let names = try await vault.memberNames()
        let anchor =
            log.checkpoint.map { "verified against checkpoint \($0.sequence) signed at \(Output.date(millis: $0.signedAt))" }
            ?? "not verified: the admin has not signed an audit checkpoint yet"
        let walked = log.resumedAfter.map {
            "resumed after entry \($0), where the last check ended: \(log.linksRead - 1) new links checked (--full checks the whole chain)"
        }
        // With --json, stdout stays the entries alone.
        for line in [anchor, walked].compactMap({ $0 }) {
            if options.json { Output.note(line) } else { Output.line(line) }
        }
        // Not a failure (an honest server restored from a backup does this), but the patient is told.
        if let rewritten = log.rewrittenSinceLastCheck { Output.note("warning: \(rewritten)") }
        try await Output.show(log.entries, json: options.json, headers: ["TIME", "WHAT", "CHECKED", "DETAILS"]) {
            log.entries.map { e in
                [
                    Output.date(millis: e.at), e.action, log.isCheckpointed(e) ? "verified" : "not yet checkpointed",
                    Output.details(e.details, names: names),
                ]
            }
        }
    }
}
