import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Follow a patient's shared data (or every patient's) as it changes, one line per change.",
        discussion: """
            Refreshes, then waits on the server's event stream (Docs/events.md) and pulls whenever it says something \
            changed. Every line is a change this device pulled, verified and stored; the stream only says when to pull.
            With --json each line is one JSON object: {"event":"subscribed",...} once the stream is open and the first \
            refresh done, then {"event":"change","patient":...,"category":...,"kind":"activity"|"outcome","id":...} per \
            change, printed once the pull that stored it ended; with "unconfirmed":true (text: UNCONFIRMED) when \
            the patient's commitment did not confirm the category then (the integrity failure is on stderr). \
            {"event":"share",...,"source":"server","verified":false} repeats the server's unverified word that a \
            share changed state; the shares are then read again, and {"event":"unwatched","patient":...} says a \
            patient whose pulls the server refuses no longer shares anything verifiable with you.
            A server that is gone is said once on stderr and tried again with growing waits; the command does not end.

            Exit status: 0 on SIGINT or SIGTERM, 65 if an integrity failure was reported meanwhile (each is printed on \
            stderr and the rest is still followed), 77 when the session ends or the server refuses it (401/403).

            Example: carevault-doctor watch alice --json
            """
    )
    @Argument(help: "Only this patient's username (default: every patient who shares with you).") var patient: String?
    @OptionGroup var options: GlobalOptions

    func run() async throws {
        let live = LiveRun(tool: "carevault-doctor")
        live.endOnSignals()
        let reader = try await openReader(options)
        let json = options.json
        let watch = DoctorWatch(reader: reader, patient: patient) { name in
            if json { live.json(UnwatchedLine(patient: name)) } else { live.line(UnwatchedLine.text(name)) }
        }
        let stream = try reader.account.events(try options.transport())
        let report: @Sendable (AppliedChange) -> Void = { change in
            if json { live.json(ChangeLine(change)) } else { live.line(ChangeLine.text(change)) }
        }
        let quiet: @Sendable (AppliedChange) -> Void = { _ in }
        var subscribed = false
        for try await update in stream.updates(onRetry: { live.retrying($0) }) {
            let problems: [String]
            do {
                switch update {
                case .ready:
                    live.connected()
                    // The first refresh catches up with what was there before; changes are what follows.
                    problems = try await watch.refreshAll(report: subscribed ? report : quiet)
                case let .change(owner, _):
                    problems = try await watch.refresh(owner: owner, report: report)
                case let .share(id, state, patient):
                    if json {
                        live.json(ShareLine(share: id, state: state))
                    } else {
                        live.line(ShareLine.text(share: id, state: state))
                    }
                    problems = try await watch.refreshShares(of: patient, report: report)
                case .resync:
                    problems = try await watch.refreshAll(report: report)
                case let .account(reason):
                    throw ClientError.notPermitted(code: .unauthorized, "the server ended this session's event stream (\(reason))")
                }
            } catch {
                // The server went away between the event and the pull: the stream reconnects, and its next
                // `ready` pulls in full.
                guard let passing = LiveRun.isPassing(error) else { throw error }
                live.retrying(passing)
                continue
            }
            for problem in problems { live.integrity(problem) }
            if case .ready = update, !subscribed {
                subscribed = true
                if json { live.json(SubscribedLine(tool: "carevault-doctor", patient: patient?.lowercased())) } else { live.line("watching") }
            }
        }
    }
}

/// `{"event":"change",...}`: one change the doctor's replica applied.
struct ChangeLine: Encodable {
    var event = "change"
    var patient: String
    var category: String
    var kind: String
    /// The activity's id; for an outcome, its activity's id and occurrence (`walk#3`); the record id when
    /// the record cannot be read here (removed, or under a key not granted).
    var id: String
    var record: String
    var deleted: Bool
    /// When the patient's device wrote it (Unix ms).
    var at: UInt64
    var title: String?
    var values: [String]?
    /// Present (true) when the pull that stored it did not end with the patient's commitment confirming
    /// the category: not shown to be current and complete, as `show` marks such records UNVERIFIED.
    var unconfirmed: Bool?

    init(_ c: AppliedChange) {
        patient = c.patient
        category = c.category
        kind = c.kind.rawValue
        record = c.recordID
        deleted = c.deleted
        at = c.at
        unconfirmed = c.unconfirmed ? true : nil
        switch c.record {
        case let .activity(a)?:
            id = a.id
            title = a.title
        case let .outcome(o)?:
            id = "\(o.activityID)#\(o.occurrence)"
            values = o.liveValues.map(CareInput.text)
        case nil:
            id = c.recordID
        }
    }

    /// The line without --json: when, whose, which category, what changed.
    static func text(_ c: AppliedChange) -> String {
        let line = ChangeLine(c)
        let when = Output.date(millis: UnixMillis(clamping: c.at))
        let what: String
        switch c.record {
        case let .activity(a)?: what = "activity \(a.id) \"\(a.title)\" (\(CareInput.describe(a.schedule)))"
        case let .outcome(o)?:
            let note = o.note.map { " note: \($0)" } ?? ""
            what = "outcome \(line.id): \(line.values?.joined(separator: ", ") ?? "")\(note)"
        case nil: what = "\(line.kind) \(c.recordID.prefix(12)) \(c.deleted ? "removed" : "(no key granted for it)")"
        }
        return "\(c.unconfirmed ? "UNCONFIRMED  " : "")\(when)  \(c.patient)  \(c.category)  \(what)"
    }
}

/// `{"event":"unwatched","patient":...}`: the server refused a pull of this patient's data and the shares,
/// read again, leave nothing to watch; a later share event reads them again.
struct UnwatchedLine: Encodable {
    var event = "unwatched"
    var patient: String

    static func text(_ patient: String) -> String {
        "\(patient) no longer shares anything with you that verifies; not watched until a share changes"
    }
}
