import Foundation
import VaultCore

extension PulledPage {
    /// The changes of a binary page whose framing already checked out (Docs/envelope-v1.md §7.3), each
    /// envelope decoded on its own: one that does not decode is a change without an envelope, named by
    /// the record id its header still gives, which the caller quarantines (Docs/design.md §5).
    init(_ frame: PullPageFrame) {
        changes = frame.changes.map { change in
            guard let envelope = try? frame.envelope(of: change) else {
                return PulledChange(sequence: change.sequence, undecodable: frame.recordID(of: change)?.hex)
            }
            return PulledChange(sequence: change.sequence, envelope: envelope)
        }
        nextCursor = frame.nextCursor
        done = frame.done
    }
}

extension PulledChange {
    /// A change whose envelope did not decode; `recordID` when its header still named one.
    init(sequence: UInt64, undecodable recordID: String?) {
        self.sequence = sequence
        envelope = nil
        self.recordID = recordID
    }
}
