import Foundation
import GRDB
import VaultAPI
import VaultCore

/// Writes shared by the users and shares: a state change reads the row, checks the state machine and
/// updates it inside one write; SQLite's single writer orders them (Docs/design.md §3).
extension SQLiteRepository {
    /// Runs `body` in a write transaction, reporting a unique-constraint violation as `.conflict(message)`.
    func write<R: Sendable>(conflict message: String, _ body: @escaping @Sendable (Database) throws -> R) async throws -> R {
        do {
            return try await pool.write(body)
        } catch  where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict(message)
        }
    }
}
