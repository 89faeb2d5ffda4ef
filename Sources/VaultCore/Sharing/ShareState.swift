/// The states of a share (Docs/design.md §3) and the only moves between them:
/// `pending -> active | rejected | revoked` (approved, rejected by the admin, or withdrawn by the patient),
/// `active -> revoked | expired`. `rejected`, `revoked` and `expired` are final.
public enum ShareState: String, Codable, Sendable, CaseIterable {
    case pending, active, rejected, revoked, expired

    /// The states this one may move to.
    public var successors: Set<ShareState> {
        switch self {
        case .pending: [.active, .rejected, .revoked]
        case .active: [.revoked, .expired]
        case .rejected, .revoked, .expired: []
        }
    }

    /// True when no move leaves this state.
    public var isFinal: Bool { successors.isEmpty }

    /// True when `self -> next` is a move of the state machine.
    public func canMove(to next: ShareState) -> Bool { successors.contains(next) }
}

/// Where an account stands (Docs/design.md §2): `pending -> active | rejected`; `rejected` is final.
public enum AccountStatus: String, Codable, Sendable, CaseIterable {
    case pending, active, rejected

    /// True when `self -> next` is a move of the account's state machine.
    public func canMove(to next: AccountStatus) -> Bool { self == .pending && next != .pending }
}
