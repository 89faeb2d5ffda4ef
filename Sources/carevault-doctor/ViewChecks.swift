import ArgumentParser
import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// Ends a command that showed what verified with exit status 65 when some records did not, or when the
/// server's records are not the complete, current set the patient committed to (Docs/envelope-v1.md §3.4).
func failIfQuarantined(_ view: PatientView) throws {
    if let message = view.quarantineMessage {
        throw CLIError(message, hint: "everything else was shown; every view fetches these records again", status: .integrity)
    }
    if let message = view.completenessMessage {
        throw CLIError(message, hint: "what was shown may be out of date or have records missing; do not rely on it", status: .integrity)
    }
}

/// On stderr, for `show`, `adherence` and `export`: the categories shown as of the state this device accepted
/// while the server is behind it, and how old that state is (an adherence past it counts nothing as done).
func noteServerBehind(_ view: PatientView) {
    guard !view.serverBehind.isEmpty else { return }
    for note in view.serverBehind { Output.note(note) }
    Output.note("what is shown is as of the patient's commitments: \(asOfText(view.asOf)); nothing after that is known here")
}

/// "as of" per category, from the patient's commitments the view was checked against.
func asOfText(_ asOf: [String: UnixMillis]) -> String {
    asOf.sorted { $0.key < $1.key }.map { "\($0.key) as of \(Output.date(millis: $0.value))" }.joined(separator: ", ")
}

/// `--allow-unconfirmed` of `adherence` and `export`.
struct UnconfirmedOption: ParsableArguments {
    @Flag(
        help: """
            Also compute or export categories not confirmed complete and current (no state commitment of the patient's \
            matched what the server sent): each marked, with a warning on stderr, exit 0. Without it such a view exits 65 \
            and nothing is written.
            """
    )
    var allowUnconfirmed = false

    /// Before anything leaves the tool (Docs/design.md §5.3): data of categories not confirmed (records held
    /// aside included) is refused (65, nothing written) unless allowed, and then said on stderr. Whatever
    /// else failed ends the command afterwards as before (`failIfQuarantined`, after what verified).
    func check(_ view: PatientView, doing: String) throws {
        let categories = view.unconfirmedData
        guard !categories.isEmpty else { return }
        let what =
            "\(categories.joined(separator: ", ")) of \(view.patient.username): not confirmed complete and current "
            + "(no state commitment of the patient's matched what the server sent)"
        if allowUnconfirmed {
            Output.note("warning: \(what); \(doing) anyway, marked unconfirmed")
            return
        }
        throw CLIError(
            "\(what); nothing was \(doing)",
            hint: "the server may be withholding records or newer versions; --allow-unconfirmed goes on, each record marked",
            status: .integrity
        )
    }
}
