import Foundation
import VaultAPI
import VaultCore

/// A move of a share through its state machine (Docs/design.md §3): from any of `from` to `to`, recording
/// the admin's approval or the reason when given and keeping the stored ones otherwise. Both backends take
/// the rule and the resulting row from here.
public struct ShareTransition: Sendable, Equatable {
    /// The states the share may be in.
    public var from: Set<ShareState>
    /// The state it moves to.
    public var to: ShareState
    /// The admin's approval, when the move approves the share.
    public var approval: Approval?
    /// Why, when the move rejects or revokes it.
    public var reason: String?

    /// Storing a newer grant beside the approved one: only an active share takes one, and it stays active.
    static let grantUpdate = ShareTransition(from: [.active], to: .active)

    /// Throws `.invalidTransition` unless a share in `state` may make this move.
    func check(_ state: ShareState) throws {
        guard from.contains(state) else { throw RepositoryError.invalidTransition(from: state.rawValue, to: to.rawValue) }
    }

    /// `share` as this move leaves it at `now`.
    func applied(to share: ShareRow, at now: UnixMillis) -> ShareRow {
        var s = share
        s.state = to
        s.approval = approval ?? s.approval
        s.reason = reason ?? s.reason
        s.updatedAt = now
        return s
    }
}
