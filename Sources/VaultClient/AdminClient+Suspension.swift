import Foundation
import VaultAPI
import VaultCore

extension AdminClient {
    /// The account named `username` (any case), or not found.
    func user(named username: String) async throws -> UserSummary {
        let wanted = Username.lookupKey(username)
        guard let user = try await users().users.first(where: { $0.username == wanted }) else {
            throw ClientError.notFound("no account named '\(username)'")
        }
        return user
    }

    /// Suspends an account (Docs/design.md §2): it cannot log in or read, its sessions end, its data stays.
    public func suspend(username: String, reason: String) async throws -> SuspensionResponse {
        let user = try await user(named: username)
        return try await transport.send(AdminEndpoints.suspend(user.userID.uuidString), SuspendRequest(reason: reason), auth: auth)
    }

    /// Lifts a suspension.
    public func reinstate(username: String) async throws -> SuspensionResponse {
        let user = try await user(named: username)
        return try await transport.send(AdminEndpoints.reinstate(user.userID.uuidString), EmptyObject(), auth: auth)
    }
}
