import Foundation
import PostgresNIO
import VaultAPI
import VaultCore

/// State changes lock the row first and check the state machine on the locked row, so concurrent server
/// instances agree (Docs/design.md §3).
extension PostgresRepository {
    /// The row `id` of `R`'s table, locked until the transaction ends; `.notFound` when there is none.
    func locked<R: StoredStateRow>(_ type: R.Type, _ conn: PostgresConnection, _ id: UUID) async throws -> R {
        guard let row = try await all(R.self, "SELECT * FROM \(unescaped: R.table) WHERE id = \(id) FOR UPDATE", on: conn).first else {
            throw RepositoryError.notFound(R.noun)
        }
        return row
    }
}
