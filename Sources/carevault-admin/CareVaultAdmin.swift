import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore
import VaultCrypto

/// `carevault-admin`: the trust anchor's tool. The private key never leaves this machine: every
/// certificate and approval is signed here, and every request to the server is signed with it.
@main
struct CareVaultAdmin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "carevault-admin",
        abstract: "Create the admin key, approve or reject registrations and shares, read and verify the audit log.",
        discussion: """
        The private key comes from --admin-secret FILE (env CAREVAULT_ADMIN_SECRET).

        Exit status: 0 ok, 64 usage, 65 integrity failure, 69 server unreachable, 75 retry later, 77 not permitted, 1 other.

        Example:
          carevault-admin keygen --out /secure/admin
          carevault-admin pending --admin-secret /secure/admin/admin.key
          carevault-admin approve --all --admin-secret /secure/admin/admin.key
        """,
        subcommands: [Keygen.self, Pending.self, Approve.self, Reject.self, Review.self, Users.self, Audit.self]
    )

    static func main() async { await ToolRunner.main(Self.self, tool: "carevault-admin") }
}

struct AdminOptions: ParsableArguments {
    @Option(name: .customLong("admin-secret"), help: ArgumentHelp("The admin private key file (env CAREVAULT_ADMIN_SECRET).", valueName: "file"))
    var secret: String?
    @OptionGroup var global: GlobalOptions

    func key() throws -> SigningKeyPair {
        guard let path = secret ?? ProcessInfo.processInfo.environment["CAREVAULT_ADMIN_SECRET"] else {
            throw CLIError.usage("the admin private key is required", hint: "pass --admin-secret FILE or set CAREVAULT_ADMIN_SECRET (made by 'carevault-admin keygen')")
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw CLIError.usage("cannot read the admin private key at \(path)") }
        if let mode = SecureFiles.permissions(URL(fileURLWithPath: path)), mode & 0o077 != 0 {
            throw CLIError("\(path) is readable by others (mode \(String(mode, radix: 8)))", hint: "chmod 600 \(path)", status: .notPermitted)
        }
        guard var raw = try? Base64URL.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)), raw.count == 32,
              let pair = try? SigningKeyPair(seed: SecureBytes(copying: raw)) else {
            throw CLIError.usage("\(path) is not an admin private key")
        }
        Memory.zero(&raw)
        return pair
    }

    func transport() throws -> Transport { try global.transport() }
}

/// What the admin talks to the server with.
struct AdminSession {
    let key: SigningKeyPair
    let transport: Transport

    init(_ options: AdminOptions) throws {
        key = try options.key()
        transport = try options.transport()
    }

    func pending() async throws -> PendingResponse { try await transport.send(.GET, Routes.adminPending, auth: .admin(key)) }

    /// What approving a pending item grants, in plain words.
    static func describe(_ r: PendingRegistration) -> String {
        "registration of \(r.request.username) as \(r.request.role.rawValue) (id \(r.request.userID.uuidString.lowercased()), key fingerprint \(fingerprint(r.request)))"
    }

    static func describe(_ s: PendingShare) -> String {
        // The signed grant's expiry, not the server's copy of it.
        let until = s.share.grant.expiresAt.map { " until \(Output.date(millis: $0))" } ?? " with no end date"
        return "share \(s.share.shareID.uuidString.lowercased()): \(s.doctor.username) may read \(s.patient.username)'s \(s.share.category)\(until)"
    }

    static func fingerprint(_ r: RegistrationRequest) -> String {
        let h = (try? BLAKE2b.hash(r.signingKey.bytes + r.boxKey.bytes, outputLength: 16)) ?? []
        return stride(from: 0, to: h.count, by: 2).map { Hex.encode(h[$0..<$0 + 2]) }.joined(separator: "-")
    }

    /// Verifies a registration's self-signature, issues its certificate and approval, and submits them.
    func approve(_ r: PendingRegistration, sequence: UInt64) async throws {
        do { try r.request.verify() } catch { throw ClientError.integrity("the registration of \(r.request.username) is not self-signed correctly: \(error)") }
        let now = Date().unixMillis
        let cert = try Certificate.issue(userID: r.request.userID, username: r.request.username, role: r.request.role, signingKey: r.request.signingKey,
                                         boxKey: r.request.boxKey, issuedAt: now, adminKey: key)
        let approval = Approval.registration(cert, issuedAt: now, sequence: sequence, adminKey: key)
        let _: UserSummary = try await transport.send(.POST, Routes.adminApproveRegistration(r.request.userID.uuidString),
                                                      body: ApproveRegistrationRequest(certificate: cert, approval: approval), auth: .admin(key))
    }

    /// Checks that the share is what it claims (both certificates are ours, the grant is the patient's,
    /// names that doctor and tresor) before signing an approval of exactly that grant.
    func approve(_ s: PendingShare, sequence: UInt64) async throws {
        do {
            try s.patient.verify(adminKey: key.publicKey, userID: s.share.patientID, role: .patient)
            try s.doctor.verify(adminKey: key.publicKey, userID: s.share.doctorID, role: .doctor)
            try s.share.grant.verify(patient: s.patient, adminKey: key.publicKey)
            guard s.share.grant.memberID == s.doctor.userID, s.share.grant.tresorID == s.share.tresorID, s.share.grant.category == s.share.category else {
                throw TrustError.mismatch(what: "share", field: "grant")
            }
        } catch { throw ClientError.integrity("the share \(s.share.shareID.uuidString.lowercased()) does not verify: \(error)") }
        let approval = Approval.share(id: s.share.shareID, grant: s.share.grant, issuedAt: Date().unixMillis, sequence: sequence, adminKey: key)
        let _: ShareInfo = try await transport.send(.POST, Routes.adminApproveShare(s.share.shareID.uuidString), body: ApproveShareRequest(approval: approval),
                                                    auth: .admin(key))
    }

    func reject(id: String, reason: String, pending: PendingResponse) async throws {
        if pending.registrations.contains(where: { $0.request.userID.uuidString.lowercased() == id.lowercased() || $0.request.username == id.lowercased() }),
           let r = pending.registrations.first(where: { $0.request.userID.uuidString.lowercased() == id.lowercased() || $0.request.username == id.lowercased() }) {
            let _: UserSummary = try await transport.send(.POST, Routes.adminRejectRegistration(r.request.userID.uuidString), body: RejectRequest(reason: reason), auth: .admin(key))
        } else if let s = pending.shares.first(where: { $0.share.shareID.uuidString.lowercased() == id.lowercased() }) {
            let _: ShareInfo = try await transport.send(.POST, Routes.adminRejectShare(s.share.shareID.uuidString), body: RejectRequest(reason: reason), auth: .admin(key))
        } else {
            throw ClientError.notFound("nothing pending with id or username '\(id)'")
        }
    }
}

struct Keygen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Create the admin key pair: admin.pub (publish, pin) and admin.key (0600, keep secret).",
                                                    discussion: "Example: carevault-admin keygen --out /secure/admin")
    @Option(help: "The folder to write admin.pub and admin.key into.") var out: String
    @Flag(help: "Replace existing files.") var force = false
    func run() async throws {
        let dir = URL(fileURLWithPath: out)
        let pub = dir.appendingPathComponent("admin.pub"), sec = dir.appendingPathComponent("admin.key")
        if !force, FileManager.default.fileExists(atPath: sec.path) || FileManager.default.fileExists(atPath: pub.path) {
            throw CLIError.usage("\(dir.path) already holds an admin key", hint: "use --force to replace it (every client pins the old public key)")
        }
        let pair = SigningKeyPair.generate()
        var seed = pair.seed.copyBytes()
        defer { Memory.zero(&seed) }
        try SecureFiles.write(Data((Base64URL.encode(seed) + "\n").utf8), to: sec)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try Data((pair.publicKey.base64URL + "\n").utf8).write(to: pub)
        print("wrote \(pub.path) (public: pin it in clients and the server) and \(sec.path) (private, mode 0600)")
    }
}

struct Pending: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List registrations and shares waiting for approval.")
    @OptionGroup var admin: AdminOptions
    func run() async throws {
        let p = try await AdminSession(admin).pending()
        if admin.global.json { try Output.json(p); return }
        Output.table(["KIND", "ID", "WHO", "WHAT"], p.registrations.map {
            ["registration", $0.request.userID.uuidString.lowercased(), $0.request.username, "\($0.request.role.rawValue), fingerprint \(AdminSession.fingerprint($0.request))"]
        } + p.shares.map {
            ["share", $0.share.shareID.uuidString.lowercased(), $0.patient.username, "\($0.share.category) with \($0.doctor.username)"]
        }, empty: "nothing pending")
    }
}

struct Approve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Approve pending registrations or shares by id (or username), or all of them.",
                                                    discussion: "Example: carevault-admin approve 3f2a… 9c1b…   or   carevault-admin approve --all")
    @Argument(help: "Ids (user id, username or share id) to approve.") var ids: [String] = []
    @Flag(help: "Approve everything pending.") var all = false
    @OptionGroup var admin: AdminOptions

    func validate() throws {
        if ids.isEmpty && !all { throw ValidationError("name what to approve, or pass --all") }
        if !ids.isEmpty && all { throw ValidationError("give ids or --all, not both") }
    }

    func run() async throws {
        let session = try AdminSession(admin)
        let p = try await session.pending()
        var seq = p.nextSequence, approved: [String] = [], failures = 0
        let wanted = Set(ids.map { $0.lowercased() })
        for r in p.registrations where all || wanted.contains(r.request.userID.uuidString.lowercased()) || wanted.contains(r.request.username) {
            do { try await session.approve(r, sequence: seq); seq += 1; approved.append(AdminSession.describe(r)) } catch {
                failures += 1
                Output.note("carevault-admin: error: \(AdminSession.describe(r)): \(error)")
            }
        }
        for s in p.shares where all || wanted.contains(s.share.shareID.uuidString.lowercased()) {
            do { try await session.approve(s, sequence: seq); seq += 1; approved.append(AdminSession.describe(s)) } catch {
                failures += 1
                Output.note("carevault-admin: error: \(AdminSession.describe(s)): \(error)")
            }
        }
        if admin.global.json { try Output.json(["approved": approved]) } else {
            for a in approved { print("approved \(a)") }
            if approved.isEmpty && failures == 0 { print("nothing to approve") }
        }
        if failures > 0 { throw CLIError("\(failures) approvals failed") }
        if !all, approved.count < wanted.count { throw ClientError.notFound("some ids are not pending") }
    }
}

struct Reject: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Reject a pending registration or share with a reason.",
                                                    discussion: "Example: carevault-admin reject 3f2a… --reason \"unknown person\"")
    @Argument(help: "The user id, username or share id.") var id: String
    @Option(help: "Why (shown to the user).") var reason: String
    @OptionGroup var admin: AdminOptions
    func run() async throws {
        let session = try AdminSession(admin)
        try await session.reject(id: id, reason: reason, pending: try await session.pending())
        if admin.global.json { try Output.json(["rejected": id]) } else { print("rejected \(id)") }
    }
}

struct Review: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Go through everything pending and approve or reject each item (y/n), or all with --yes.",
                                                    discussion: "Scripts/approve runs this. Example: carevault-admin review --admin-secret admin.key")
    @Flag(help: "Approve everything pending without asking.") var yes = false
    @OptionGroup var admin: AdminOptions

    func ask(_ question: String) -> String {
        FileHandle.standardError.write(Data(question.utf8))
        return (readLine() ?? "").trimmingCharacters(in: .whitespaces).lowercased()
    }

    func run() async throws {
        let session = try AdminSession(admin)
        let p = try await session.pending()
        var seq = p.nextSequence, failures = 0, count = 0
        if p.registrations.isEmpty && p.shares.isEmpty { print("nothing pending"); return }
        typealias Item = (String, (UInt64) async throws -> Void, String)
        let items: [Item] = p.registrations.map { r in (AdminSession.describe(r), { try await session.approve(r, sequence: $0) }, r.request.userID.uuidString) }
            + p.shares.map { s in (AdminSession.describe(s), { try await session.approve(s, sequence: $0) }, s.share.shareID.uuidString) }
        for (text, approve, id) in items {
            var answer = yes ? "y" : ""
            while !["y", "n", "s"].contains(answer) {
                answer = ask("\(text)\n  approve? [y]es / [n]o (reject) / [s]kip: ")
                if answer.isEmpty, isatty(STDIN_FILENO) == 0 { answer = "s" }
            }
            do {
                switch answer {
                case "y":
                    try await approve(seq); seq += 1; count += 1
                    print("approved \(text)")
                case "n":
                    let reason = yes ? "rejected by the admin" : ask("  reason: ")
                    try await session.reject(id: id, reason: reason.isEmpty ? "rejected by the admin" : reason, pending: p)
                    print("rejected \(text)")
                default:
                    print("skipped \(text)")
                }
            } catch {
                failures += 1
                Output.note("carevault-admin: error: \(text): \(error)")
            }
        }
        if failures > 0 { throw CLIError("\(failures) of \(items.count) items failed") }
    }
}

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List every account.")
    @OptionGroup var admin: AdminOptions
    func run() async throws {
        let session = try AdminSession(admin)
        let list: UserList = try await session.transport.send(.GET, Routes.adminUsers, auth: .admin(session.key))
        if admin.global.json { try Output.json(list); return }
        Output.table(["USERNAME", "ROLE", "STATUS", "SINCE", "FINGERPRINT"], list.users.map {
            [$0.username, $0.role.rawValue, $0.status.rawValue, Output.date(millis: $0.createdAt), $0.fingerprint ?? "-"]
        }, empty: "no users")
    }
}

struct Audit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Read or verify the hash-chained audit log.", subcommands: [Verify.self, Log.self])

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Check the whole chain; exit 65 if any entry was edited or deleted.")
        @OptionGroup var admin: AdminOptions
        func run() async throws {
            let session = try AdminSession(admin)
            let result: AuditVerification = try await session.transport.send(.GET, Routes.adminAuditVerify, auth: .admin(session.key))
            if admin.global.json { try Output.json(result) } else if result.ok { print("audit log intact: \(result.entriesChecked) entries") }
            if !result.ok {
                throw CLIError("audit log broken at entry \(result.brokenAt ?? 0): \(result.problem ?? "unknown")", status: .integrity)
            }
        }
    }

    struct Log: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print audit entries.")
        @Option(help: "Start after this entry.") var after: UInt64 = 0
        @Option(help: "At most this many entries.") var limit = 200
        @OptionGroup var admin: AdminOptions
        func run() async throws {
            let session = try AdminSession(admin)
            let page: AuditPage = try await session.transport.send(.GET, Routes.adminAudit + "?after=\(after)&limit=\(limit)", auth: .admin(session.key))
            if admin.global.json { try Output.json(page); return }
            Output.table(["#", "TIME", "ACTOR", "ACTION", "DETAILS"], page.entries.map { e in
                [String(e.sequence), Output.date(millis: e.at), e.actor, e.action, e.details.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")]
            }, empty: "the audit log is empty")
        }
    }
}
