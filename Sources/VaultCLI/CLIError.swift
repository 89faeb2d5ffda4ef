import ArgumentParser
import CAllocator
import Foundation
import VaultClient
import VaultCore
import VaultCrypto

/// Exit statuses of every CareVault tool (Docs/design.md §7).
public enum ExitStatus: Int32, Sendable {
    case success = 0
    case other = 1
    case usage = 64
    case integrity = 65
    case unreachable = 69
    case temporary = 75
    case notPermitted = 77
    /// The server serves only newer versions of the tools (Docs/design.md §8).
    case upgradeRequired = 78
}

/// An error a tool reports itself, with its exit status and an optional hint.
public struct CLIError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var hint: String?
    public var status: ExitStatus

    public init(_ message: String, hint: String? = nil, status: ExitStatus = .other) {
        self.message = message
        self.hint = hint
        self.status = status
    }

    public static func usage(_ message: String, hint: String? = nil) -> CLIError { CLIError(message, hint: hint, status: .usage) }
    public var description: String { message }
}

/// Runs a tool: parses, runs, and turns every error into `tool: error: …`, a `hint:` line where one
/// helps, and the documented exit status. Health data and key material never appear in these messages.
public enum ToolRunner {
    public static func main<Root: ParsableCommand>(_ root: Root.Type, tool: String, server: @escaping () -> String = { "the server" }) async {
        // One allocator arena per core (at least two), not one per thread (glibc's default, up to eight per
        // core), which kept memory the threads no longer used: a doctor's read of 100,000 records peaked at 134
        // or 145 MiB from run to run, at about 132 MiB with two (Docs/benchmarks.md §7). MALLOC_ARENA_MAX, when
        // set, decides.
        _ = carevault_limit_malloc_arenas(Int32(clamping: max(2, ProcessInfo.processInfo.activeProcessorCount)))
        // Before any file is made: the local store with its -wal and -shm files, profiles and key files are
        // the user's alone (0600, folders 0700), whatever umask the tool was started with.
        umask(0o077)
        do {
            var command = try Root.parseAsRoot()
            if var async = command as? any AsyncParsableCommand {
                try await async.run()
            } else {
                try command.run()
            }
            exit(0)
        } catch {
            let (message, hint, status) = describe(error, tool: tool, root: root)
            if status == .success {
                print(message)
                exit(0)
            }
            // ArgumentParser's own usage text starts with "Error: "; the tools' format replaces it.
            let text = message.hasPrefix("Error: ") ? String(message.dropFirst("Error: ".count)) : message
            // Messages can quote the server or another user: neutralised like every other printed text.
            // Line by line: a message may span lines (usage text) but no line may carry a raw control character.
            func shown(_ s: String) -> String {
                s.split(separator: "\n", omittingEmptySubsequences: false).map { Output.printable(String($0)) }.joined(separator: "\n")
            }
            var lines = "\(tool): error: \(shown(text))\n"
            if let hint { lines += "hint: \(shown(hint))\n" }
            FileHandle.standardError.write(Data(lines.utf8))
            exit(status.rawValue)
        }
    }

    static func describe<Root: ParsableCommand>(_ error: any Error, tool: String, root: Root.Type) -> (String, String?, ExitStatus) {
        switch error {
        case let e as CLIError:
            return (e.message, e.hint, e.status)
        case let e as ClientError:
            return describe(e)
        case let e as TrustError:
            return describe(ClientError.from(e))
        case let e as EnvelopeError:
            return describe(ClientError.from(e))
        case let e as CryptoError:
            return describe(ClientError.from(e))
        default:
            let code = Root.exitCode(for: error)
            let text = Root.fullMessage(for: error)
            if code == .success { return (text, nil, .success) }
            if code == .validationFailure { return (text, nil, .usage) }
            return (text.isEmpty ? "\(error)" : text, nil, .other)
        }
    }

    static func describe(_ e: ClientError) -> (String, String?, ExitStatus) {
        switch e {
        case let .serverUnreachable(m) where m.hasPrefix("the certificate of "):
            // The server answered; its certificate is what failed (Docs/operations.md §1).
            return (
                "cannot trust the server: \(m)", "the server is running: check its certificate, --ca-cert and the host name in --server", .unreachable
            )
        case let .serverUnreachable(m):
            return ("cannot reach the server (\(m))", "is carevault-server running? set --server URL or CAREVAULT_SERVER", .unreachable)
        case let .temporary(m):
            return (m, m.hasSuffix("try again") ? nil : "try again in a moment", .temporary)
        case let .notPermitted(code, m):
            switch code {
            case .pendingApproval?: return (m, "ask the admin to approve the account (Scripts/approve)", .notPermitted)
            case .invalidCredentials?: return (m, "check the username and password", .notPermitted)
            case .shareNotActive?: return (m, "the patient must share the category and the admin approve it", .notPermitted)
            case .unauthorized?: return (m, "run 'login' again", .notPermitted)
            default: return (m, nil, .notPermitted)
            }
        case let .integrity(m) where e.isUnreadableAnswer:
            return (m, "check that --server points at a CareVault server (a proxy may be answering instead); nothing was applied", .integrity)
        case let .integrity(m) where m.contains("integrity check and was not") || m.contains("integrity check and were not"):
            // Records kept aside (quarantined): the rest was applied, so "nothing was applied" would be wrong.
            return ("integrity check failed: \(m)", "the named records were altered or forged on the server; everything else was applied", .integrity)
        case let .integrity(m):
            return ("integrity check failed: \(m)", "the data or a key was tampered with or forged; nothing was applied", .integrity)
        case let .invalidRequest(m):
            return (m, nil, .usage)
        case let .notFound(m):
            return (m, nil, .other)
        case let .conflict(m):
            return (m, nil, .other)
        case let .localState(m):
            return (m, m.contains("not logged in") ? "run 'register' or 'login' first" : nil, .other)
        case let .server(_, m):
            return (m, nil, .other)
        case let .upgradeRequired(m):
            return (m, "upgrade the CareVault tools to the release the server names, then run the command again", .upgradeRequired)
        }
    }
}
