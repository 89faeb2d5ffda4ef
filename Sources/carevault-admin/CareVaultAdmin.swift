import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore
import VaultCrypto

/// `carevault-admin`: the trust anchor's tool. The private key never leaves this machine: every
/// certificate and approval is signed here (through `AdminClient`), and so is every request to the server.
@main
struct CareVaultAdmin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "carevault-admin",
        abstract: "Create the admin key, approve or reject registrations and shares, read and verify the audit log.",
        discussion: """
            The private key comes from --admin-secret FILE (env CAREVAULT_ADMIN_SECRET).

            Exit status: 0 ok, 64 usage, 65 integrity failure, 69 server unreachable, 75 retry later, 77 not permitted, 78 upgrade the tool, 1 other.

            Example:
              carevault-admin keygen --out /secure/admin
              carevault-admin pending --admin-secret /secure/admin/admin.key
              carevault-admin approve --all --admin-secret /secure/admin/admin.key
            """,
        version: CareVaultVersion.current,
        subcommands: [Keygen.self, Pending.self, Approve.self, Reject.self, Review.self, Users.self, Audit.self, Suspend.self, Reinstate.self]
    )

    static func main() async { await ToolRunner.main(Self.self, tool: "carevault-admin") }
}

struct AdminOptions: ParsableArguments {
    @Option(
        name: .customLong("admin-secret"),
        help: ArgumentHelp("The admin private key file (env CAREVAULT_ADMIN_SECRET).", valueName: "file")
    )
    var secret: String?
    @Option(
        help: ArgumentHelp(
            "The ledger of issued certificates (env CAREVAULT_ADMIN_LEDGER; default: issued-certificates.json beside the private key).",
            valueName: "file"
        )
    )
    var ledger: String?
    @Option(
        name: .customLong("checkpoint-file"),
        help: ArgumentHelp(
            "The newest audit checkpoint seen (env CAREVAULT_ADMIN_CHECKPOINT; default: audit-checkpoint.json beside the private key).",
            valueName: "file"
        )
    )
    var checkpointFile: String?
    @OptionGroup var global: GlobalOptions

    func key() throws -> SigningKeyPair {
        guard let path = secret ?? ProcessInfo.processInfo.environment["CAREVAULT_ADMIN_SECRET"] else {
            throw CLIError.usage(
                "the admin private key is required",
                hint: "pass --admin-secret FILE or set CAREVAULT_ADMIN_SECRET (made by 'carevault-admin keygen')"
            )
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw CLIError.usage("cannot read the admin private key at \(Output.printable(path))")
        }
        if let mode = SecureFiles.permissions(URL(fileURLWithPath: path)), mode & 0o077 != 0 {
            let shown = Output.printable(path)
            throw CLIError("\(shown) is readable by others (mode \(String(mode, radix: 8)))", hint: "chmod 600 \(shown)", status: .notPermitted)
        }
        guard var raw = try? Base64URL.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)), raw.count == 32,
            let pair = try? SigningKeyPair(seed: SecureBytes(copying: raw))
        else {
            throw CLIError.usage("\(Output.printable(path)) is not an admin private key")
        }
        Memory.zero(&raw)
        return pair
    }

    /// The admin's client: the key read here is the trust anchor, so its own public half is the pin.
    /// With the ledger of issued certificates, so a second identity under a known name or id is refused, and
    /// the ledger of decided share requests beside it, so a request is never approved twice.
    func client() throws -> AdminClient {
        let key = try key()
        let ledgerURL = try ledgerURL()
        return try AdminClient(
            transport: try global.transport(),
            key: key,
            pinnedKey: key.publicKey,
            ledger: try CertificateLedger(url: ledgerURL),
            decisions: try ShareDecisionLedger(url: ShareDecisionLedger.url(besideCertificateLedger: ledgerURL))
        )
    }

    func ledgerURL() throws -> URL {
        if let path = ledger ?? ProcessInfo.processInfo.environment["CAREVAULT_ADMIN_LEDGER"] { return URL(fileURLWithPath: path) }
        return CertificateLedger.url(besideAdminKey: try secretURL())
    }

    /// Where the newest audit checkpoint is remembered (Docs/design.md §6).
    func checkpointStore() throws -> AuditCheckpointStore {
        if let path = checkpointFile ?? ProcessInfo.processInfo.environment["CAREVAULT_ADMIN_CHECKPOINT"] {
            return AuditCheckpointStore(url: URL(fileURLWithPath: path))
        }
        return AuditCheckpointStore(url: AuditCheckpointStore.url(besideAdminKey: try secretURL()))
    }

    private func secretURL() throws -> URL {
        guard let secret = secret ?? ProcessInfo.processInfo.environment["CAREVAULT_ADMIN_SECRET"] else {
            throw CLIError.usage("the admin private key is required", hint: "pass --admin-secret FILE or set CAREVAULT_ADMIN_SECRET")
        }
        return URL(fileURLWithPath: secret)
    }
}

extension PendingItem {
    /// What approving the item grants, in plain words.
    var summary: String {
        switch self {
        case let .registration(r):
            let who = "\(r.request.username) as \(r.request.role.rawValue)"
            return "registration of \(who) (id \(id), key fingerprint \(AdminClient.fingerprint(r.request)))"
        case let .share(s):
            // The signed grant's expiry, not the server's copy of it.
            let until = s.share.grant.expiresAt.map { " until \(Output.date(millis: $0))" } ?? " with no end date"
            return "share \(id): \(s.doctor.username) may read \(s.patient.username)'s \(s.share.category)\(until)"
        }
    }
}

struct Keygen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create the admin key pair: admin.pub (publish, pin) and admin.key (0600, keep secret).",
        discussion: "Example: carevault-admin keygen --out /secure/admin"
    )
    @Option(help: "The folder to write admin.pub and admin.key into.") var out: String
    @Flag(help: "Replace existing files.") var force = false
    func run() async throws {
        let dir = URL(fileURLWithPath: out)
        let pub = dir.appendingPathComponent("admin.pub")
        let sec = dir.appendingPathComponent("admin.key")
        if !force, FileManager.default.fileExists(atPath: sec.path) || FileManager.default.fileExists(atPath: pub.path) {
            throw CLIError.usage(
                "\(Output.printable(dir.path)) already holds an admin key",
                hint: "use --force to replace it (every client pins the old public key)"
            )
        }
        let pair = SigningKeyPair.generate()
        var seed = pair.seed.copyBytes()
        defer { Memory.zero(&seed) }
        try SecureFiles.write(Data((Base64URL.encode(seed) + "\n").utf8), to: sec)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try Data((pair.publicKey.base64URL + "\n").utf8).write(to: pub)
        // Public, and read by the server's own user: 0644 whatever the tool's umask (077).
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: pub.path)
        Output.line("wrote \(pub.path) (public: pin it in clients and the server) and \(sec.path) (private, mode 0600)")
    }
}

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List every account.")
    @OptionGroup var admin: AdminOptions
    func run() async throws {
        let list = try await admin.client().users()
        try await Output.show(list, json: admin.global.json, headers: ["USERNAME", "ROLE", "STATUS", "SINCE", "FINGERPRINT"], empty: "no users") {
            list.users.map { [$0.username, $0.role.rawValue, $0.status.rawValue, Output.date(millis: $0.createdAt), $0.fingerprint ?? "-"] }
        }
    }
}
