import Foundation
import VaultAPI
import VaultCore

extension PatientVault {
    /// The patient's own access log: who read what, logins, share changes.
    public func accessLog(after: UInt64 = 0) async throws -> [AuditEntry] {
        var entries: [AuditEntry] = []
        var cursor = after
        while true {
            let page: AuditPage = try await transport.send(.GET, Routes.accessLog + "?after=\(cursor)&limit=500", auth: try auth)
            entries += page.entries
            cursor = page.nextCursor
            if page.done || page.entries.isEmpty { return entries }
        }
    }
}
