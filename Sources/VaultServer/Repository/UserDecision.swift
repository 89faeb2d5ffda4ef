import Foundation
import VaultAPI
import VaultCore

/// An admin's decision on a pending account (Docs/design.md §2): the status it moves to, with the
/// certificate and approval that approve it or the reason that rejects it. Both backends take the rule
/// (only a pending account is decided) and the resulting row from here.
public struct UserDecision: Sendable, Equatable {
    /// The status the account moves to.
    public var status: AccountStatus
    /// The admin-signed certificate of an approval.
    public var certificate: Certificate?
    /// The admin's approval covering the certificate.
    public var approval: Approval?
    /// Why the account was rejected.
    public var reason: String?

    /// The status an account must have to be decided.
    static let from = AccountStatus.pending

    /// Throws `.invalidTransition` unless `user` may be decided.
    func check(_ user: UserRow) throws {
        guard user.status == Self.from else { throw RepositoryError.invalidTransition(from: user.status.rawValue, to: status.rawValue) }
    }

    /// `user` as this decision leaves it at `now`.
    func applied(to user: UserRow, at now: UnixMillis) -> UserRow {
        var u = user
        u.status = status
        u.certificate = certificate
        u.approval = approval
        u.rejectReason = reason
        u.updatedAt = now
        return u
    }
}
