import Dispatch
import Foundation
import VaultClient

#if canImport(Glibc)
import Glibc
#endif

/// What a watching command (`carevault-doctor watch`, `carevault-patient sync --watch`) shares while it
/// runs: it ends on SIGINT or SIGTERM with exit status 0, or 65 when it reported an integrity failure; a
/// server that is gone is said once on stderr (again only after it came back); lines go out at once.
public final class LiveRun: @unchecked Sendable {
    private let lock = NSLock()
    private var failed = false
    private var away = false
    private var sources: [any DispatchSourceSignal] = []
    let tool: String

    public init(tool: String) { self.tool = tool }

    /// Ends the process on SIGINT or SIGTERM, with 0, or 65 when an integrity failure was reported.
    public func endOnSignals() {
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [self] in end() }
            source.resume()
            sources.append(source)
        }
    }

    private func end() -> Never {
        // Held to the end: no line is cut in half by the exit.
        lock.lock()
        fflush(nil)
        if failed { Output.note("\(tool): integrity failures were reported above (exit status 65)") }
        exit(failed ? ExitStatus.integrity.rawValue : ExitStatus.success.rawValue)
    }

    /// An integrity failure, printed as a line on stderr; the command keeps watching the rest.
    public func integrity(_ message: String) {
        lock.withLock { failed = true }
        Output.note("\(tool): integrity check failed: \(message)")
    }

    /// The connection failed and will be tried again: said once until `connected`.
    public func retrying(_ error: ClientError) {
        let first = lock.withLock {
            defer { away = true }
            return !away
        }
        if first { Output.note("\(tool): \(error.description); retrying until it answers (Ctrl-C to stop)") }
    }

    /// The stream is open again.
    public func connected() {
        let back = lock.withLock {
            defer { away = false }
            return away
        }
        if back { Output.note("\(tool): connected again") }
    }

    /// Whether a failure is one the command waits out (the server is gone or busy) rather than ends on.
    public static func isPassing(_ error: any Error) -> ClientError? {
        guard let e = error as? ClientError else { return nil }
        switch e {
        case .serverUnreachable, .temporary: return e
        default: return nil
        }
    }

    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// One line of text on stdout, sent at once.
    public func line(_ text: String) {
        lock.withLock {
            Output.line(text)
            fflush(nil)
        }
    }

    /// One JSON object on one line of stdout, sent at once.
    public func json(_ value: some Encodable) {
        guard let data = try? Self.encoder.encode(value) else { return }
        lock.withLock {
            print(Output.jsonText(data))
            fflush(nil)
        }
    }
}

/// `{"event":"subscribed",...}`: the stream is open and the first refresh done.
public struct SubscribedLine: Encodable {
    public var event = "subscribed"
    public var tool: String
    public var patient: String?
    public init(tool: String, patient: String? = nil) {
        self.tool = tool
        self.patient = patient
    }
}

/// `{"event":"share",...}`: a share this account is party to changed state, as the server claims it
/// (`"source":"server"`, `"verified":false`): the event is not signed by anyone, so the line says only
/// what the server said; what the tool does after it (shares read again, keys sealed) is verified.
public struct ShareLine: Encodable {
    public var event = "share"
    public var share: UUID
    public var state: String
    public var source = "server"
    public var verified = false
    public init(share: UUID, state: String) {
        self.share = share
        self.state = state
    }

    /// The line without --json, plainly the server's word.
    public static func text(share: UUID, state: String) -> String {
        "the server says share \(share.uuidString.lowercased()) is now \(state) (not verified; the shares are read again)"
    }
}
