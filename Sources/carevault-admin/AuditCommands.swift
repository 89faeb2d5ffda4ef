import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// `carevault-admin audit`: the audit log checked here, against checkpoints signed with the admin key
/// (Docs/design.md §6), never by taking the server's word for it.
struct Audit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read, verify or checkpoint the hash-chained audit log.",
        subcommands: [Verify.self, Checkpoint.self, Log.self]
    )

    /// The exit for a chain that does not verify: the first broken sequence and why.
    static func failure(_ broken: AuditChainBreak) -> CLIError {
        CLIError(
            "audit log broken at entry \(broken.sequence) (\(broken.reason.rawValue)): \(broken.detail)",
            hint: "the server's database was changed outside the server; keep a copy of it and of the checkpoint file",
            status: .integrity
        )
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download the whole log and check it here; exit 65 if any entry was edited, removed or rehashed.",
            discussion: """
                The full check, always from entry 1: sequence numbers from 1, every previous-hash link, every
                hash recomputed from its entry, every checkpoint's admin signature and hash, and that the newest
                checkpoint remembered in the checkpoint file is still on the server. 'audit checkpoint' checks
                less (only the entries after the remembered checkpoint): run this one regularly too.

                Example: carevault-admin audit verify --admin-secret /secure/admin/admin.key
                """
        )
        @OptionGroup var admin: AdminOptions
        func run() async throws {
            let (report, _) = try await admin.client().verifyAuditChain(store: try admin.checkpointStore())
            if admin.global.json {
                try Output.json(report)
            } else if report.ok {
                Output.line("audit log intact: \(report.entriesChecked) entries; " + Self.anchor(report.newestCheckpoint))
            }
            if let broken = report.broken { throw Audit.failure(broken) }
        }

        static func anchor(_ checkpoint: AuditCheckpoint?) -> String {
            guard let c = checkpoint else { return "no signed checkpoint yet (make one with 'carevault-admin audit checkpoint')" }
            return "verified against checkpoint \(c.sequence) signed at \(Output.date(millis: c.signedAt))"
        }
    }

    struct Checkpoint: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Verify the log, then sign a checkpoint at its newest entry and store it on the server.",
            discussion: """
                Starts from the newest checkpoint remembered in the checkpoint file when the server still lists
                it, the entry at its sequence still has the signed hash and the server's own check of its log
                passes: only the entries after it are downloaded and checked here, as 'audit verify' checks
                them. An edit before that checkpoint that leaves the stored hashes alone is caught only by
                'audit verify' (or the server's own check), so run that too. Otherwise, and with --full, the
                whole log is checked first, as 'audit verify' does.

                Example: carevault-admin audit checkpoint --admin-secret /secure/admin/admin.key
                """
        )
        @OptionGroup var admin: AdminOptions
        @Flag(help: "Check the whole log from entry 1 before signing, as 'audit verify' does.") var full = false
        func run() async throws {
            let client = try admin.client()
            let store = try admin.checkpointStore()
            let (report, entries) = try await full ? client.verifyAuditChain(store: store) : client.verifyAuditChainSinceCheckpoint(store: store)
            if let broken = report.broken { throw Audit.failure(broken) }
            let checkpoint = try await client.signCheckpoint(verified: report, entries: entries, store: store)
            if admin.global.json {
                try Output.json(checkpoint)
            } else {
                Output.line("signed checkpoint \(checkpoint.sequence) at \(Output.date(millis: checkpoint.signedAt))")
                if let from = report.resumedAt {
                    Output.line("checked the \(report.entriesChecked) entries after checkpoint \(from) ('audit verify' checks them all)")
                }
            }
        }
    }

    struct Log: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print audit entries.")
        @Option(help: "Start after this entry.") var after: UInt64 = 0
        @Option(help: "At most this many entries.") var limit = 200
        @OptionGroup var admin: AdminOptions
        func run() async throws {
            let page = try await admin.client().auditLog(after: after, limit: limit)
            let headers = ["#", "TIME", "ACTOR", "ACTION", "DETAILS"]
            try await Output.show(page, json: admin.global.json, headers: headers, empty: "the audit log is empty") {
                page.entries.map { e in [String(e.sequence), Output.date(millis: e.at), e.actor, e.action, Output.details(e.details)] }
            }
        }
    }
}
