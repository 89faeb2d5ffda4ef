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
                Checks sequence numbers from 1, every previous-hash link, every hash recomputed from its entry,
                every checkpoint's admin signature and hash, and that the newest checkpoint remembered in the
                checkpoint file is still on the server.

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
            discussion: "Example: carevault-admin audit checkpoint --admin-secret /secure/admin/admin.key"
        )
        @OptionGroup var admin: AdminOptions
        func run() async throws {
            let client = try admin.client()
            let store = try admin.checkpointStore()
            let (report, entries) = try await client.verifyAuditChain(store: store)
            if let broken = report.broken { throw Audit.failure(broken) }
            let checkpoint = try await client.signCheckpoint(verified: report, entries: entries, store: store)
            if admin.global.json {
                try Output.json(checkpoint)
            } else {
                Output.line("signed checkpoint \(checkpoint.sequence) at \(Output.date(millis: checkpoint.signedAt))")
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
