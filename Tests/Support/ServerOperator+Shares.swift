import Foundation
import VaultAPI
import VaultCore
import VaultServer

/// The share, user and tresor rows as a hostile operator rewrites them: who a share names, its state and
/// its end, certificates and names in the directory, a tresor's self-grant.
extension ServerOperator {
    /// Which share rows an edit touches.
    public enum ShareRows: Sendable {
        /// The share with this id.
        case id(UUID)
        /// Every share naming the doctor of this username.
        case doctor(String)
        /// The shares of one category naming the doctor of this username.
        case doctorCategory(String, String)
        /// Every share of the patient of this username.
        case patient(String)
        /// Every share.
        case all

        var condition: String {
            switch self {
            case let .id(id): "id = \(ServerOperator.text(id.uuidString.lowercased()))"
            case let .doctor(name): "doctor_id = \(ServerOperator.userID(name))"
            case let .doctorCategory(name, category): "doctor_id = \(ServerOperator.userID(name)) AND category = \(ServerOperator.text(category))"
            case let .patient(name): "patient_id = \(ServerOperator.userID(name))"
            case .all: "1 = 1"
            }
        }
    }

    /// What a share row keeps of how it ended, or when it ends.
    public enum ShareEnd: Sendable, Hashable {
        /// The patient's signed revocation.
        case revocation
        /// The reason the share ended.
        case reason
        /// The expiry date.
        case expiry

        var column: String {
            switch self {
            case .revocation: "revocation_json"
            case .reason: "reason"
            case .expiry: "expires_at"
            }
        }
    }

    /// Sets the state of the shares `rows` (when given), shows `revocation` as theirs (when given), and
    /// forgets what `forgetting` names of their end.
    public func editShares(
        _ rows: ShareRows,
        state: ShareState? = nil,
        revocation: ShareRevocation? = nil,
        forgetting: Set<ShareEnd> = []
    ) async throws {
        var set: [String] = []
        if let state { set.append("state = '\(state.rawValue)'") }
        if let revocation { set.append("revocation_json = \(try Self.json(revocation))") }
        for end in [ShareEnd.revocation, .reason, .expiry] where forgetting.contains(end) { set.append("\(end.column) = NULL") }
        try await execute("UPDATE shares SET \(set.joined(separator: ", ")) WHERE \(rows.condition)")
    }

    /// Sets the state of the share `id`, and forgets its revocation and reason when `clearingEnd`.
    public func setShareState(_ id: UUID, _ state: ShareState, clearingEnd: Bool = true) async throws {
        try await editShares(.id(id), state: state, forgetting: clearingEnd ? [.revocation, .reason] : [])
    }

    /// Files the shares `rows` under another patient or doctor (by username), whatever their grants say.
    public func refileShares(_ rows: ShareRows, patient: String? = nil, doctor: String? = nil) async throws {
        var set: [String] = []
        if let patient { set.append("patient_id = \(Self.userID(patient))") }
        if let doctor { set.append("doctor_id = \(Self.userID(doctor))") }
        try await execute("UPDATE shares SET \(set.joined(separator: ", ")) WHERE \(rows.condition)")
    }

    /// Gives the shares `rows` the admin's approval of the share `from` names (the first such row).
    public func copyShareApproval(from: ShareRows, to rows: ShareRows) async throws {
        try await execute(
            "UPDATE shares SET approval = (SELECT o.approval FROM shares o WHERE o.\(from.condition)) WHERE \(rows.condition)"
        )
    }

    /// Files a copy of the share `id` under the new id `copy`, pending: same parties, tresor, request and
    /// dates, without its approval, delivered grant or end.
    public func copyShare(_ id: UUID, as copy: UUID) async throws {
        try await execute(
            """
            INSERT INTO shares (id, patient_id, doctor_id, tresor_id, category, state, grant_json, created_at, updated_at, expires_at)
            SELECT \(Self.text(copy.uuidString.lowercased())), patient_id, doctor_id, tresor_id, category, 'pending', grant_json, created_at, updated_at, expires_at
            FROM shares WHERE id = \(Self.text(id.uuidString.lowercased()))
            """
        )
    }

    /// Drops the rule that a doctor holds at most one open share of a tresor.
    public func allowSeveralOpenShares() async throws {
        try await execute("DROP INDEX shares_open")
    }

    // MARK: Directory and tresors

    /// Shows `certificate` as the directory's certificate of `username`.
    public func setCertificate(of username: String, _ certificate: Certificate) async throws {
        try await execute("UPDATE users SET certificate = \(try Self.json(certificate)) WHERE username = \(Self.text(username))")
    }

    /// Renames the user `username` to `newName`.
    public func rename(_ username: String, to newName: String) async throws {
        try await execute("UPDATE users SET username = \(Self.text(newName)) WHERE username = \(Self.text(username))")
    }

    /// Rewrites the stored registration request of `username`, each `(from, to)` replaced in its text in order.
    public func editRegistration(of username: String, replacing pairs: [(String, String)]) async throws {
        var column = "registration"
        for (from, to) in pairs { column = "replace(\(column), \(Self.text(from)), \(Self.text(to)))" }
        try await execute("UPDATE users SET registration = \(column) WHERE username = \(Self.text(username))")
    }

    /// Shows `update` as the newest credential change of the user `userID`.
    public func setCredentialUpdate(of userID: UUID, _ update: some Encodable) async throws {
        try await execute(
            "UPDATE account_credentials SET credential_update = \(try Self.json(update)) WHERE user_id = \(Self.text(userID.uuidString.lowercased()))"
        )
    }

    /// Puts back a self-grant of the tresor of `category` owned by `owner` (a username), at `epoch`.
    public func setSelfGrant(owner: String, category: String, _ selfGrant: Grant, epoch: UInt32) async throws {
        try await execute(
            "UPDATE tresors SET self_grant = \(try Self.json(selfGrant)), current_epoch = \(epoch) "
                + "WHERE owner_id = \(Self.userID(owner)) AND category = \(Self.text(category))"
        )
    }

    /// Swaps the category labels of the tresors of categories `a` and `b`.
    public func swapTresorCategories(_ a: String, _ b: String) async throws {
        try await execute("UPDATE tresors SET category = 'tmp' WHERE category = \(Self.text(a))")
        try await execute("UPDATE tresors SET category = \(Self.text(a)) WHERE category = \(Self.text(b))")
        try await execute("UPDATE tresors SET category = \(Self.text(b)) WHERE category = 'tmp'")
    }

    /// The id of the user `username`, as an SQL expression.
    static func userID(_ username: String) -> String { "(SELECT id FROM users WHERE username = \(text(username)))" }

    /// `value`'s JSON as the server stores signed statements (sorted keys, slashes unescaped), as an SQL literal.
    static func json(_ value: some Encodable) throws -> String { text(String(decoding: try JSONEncoder.sorted.encode(value), as: UTF8.self)) }
}
