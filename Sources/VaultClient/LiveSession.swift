import Foundation
import VaultAPI

extension UnlockedAccount {
    /// The event stream of this account's session (Docs/events.md), over `transport`.
    public func events(_ transport: Transport, policy: EventStream.Policy = EventStream.Policy()) throws -> EventStream {
        guard case let .session(token) = try sessionAuth else { throw ClientError.notPermitted(code: .unauthorized, "not logged in") }
        return EventStream(transport: transport, token: token, policy: policy)
    }
}

extension PatientVault {
    /// How many local versions wait to be sent: a cheap read of the outbox that another command may
    /// have written to since (`sync --watch` pushes when it is not empty).
    nonisolated public func unsentCount() async throws -> Int { try await store.outboxCountWaiting() }
}
