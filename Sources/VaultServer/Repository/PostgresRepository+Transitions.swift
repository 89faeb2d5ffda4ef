import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// Writes shared by the users, tresors and shares: state changes lock the row first and check the state
/// machine on the locked row, so concurrent server instances agree (Docs/design.md §3).
extension PostgresRepository {
    /// Runs `body` in a transaction, reporting a unique-constraint violation as `.conflict(message)`.
    func transaction<R: Sendable>(conflict message: String, _ body: (PostgresConnection) async throws -> R) async throws -> R {
        do {
            return try await transaction(body)
        } catch  where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict(message)
        }
    }

    /// The row `id` of `R`'s table, locked until the transaction ends; `.notFound` when there is none.
    func locked<R: StoredStateRow>(_ type: R.Type, _ conn: PostgresConnection, _ id: UUID) async throws -> R {
        guard let row = try await all(R.self, "SELECT * FROM \(unescaped: R.table) WHERE id = \(id) FOR UPDATE", on: conn).first else {
            throw RepositoryError.notFound(R.noun)
        }
        return row
    }
}
