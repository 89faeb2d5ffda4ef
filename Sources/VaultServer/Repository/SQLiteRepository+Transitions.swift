import Foundation
import GRDB
import VaultAPI
import VaultCore

/// Writes shared by the users and shares: state changes are one compare-and-set UPDATE each; SQLite's
/// single writer orders them (Docs/design.md §3).
extension SQLiteRepository {
    /// Runs `body` in a write transaction, reporting a unique-constraint violation as `.conflict(message)`.
    func write<R: Sendable>(conflict message: String, _ body: @escaping @Sendable (Database) throws -> R) async throws -> R {
        do {
            return try await pool.write(body)
        } catch  where Self.isUniqueViolation(error) {
            throw RepositoryError.conflict(message)
        }
    }

    /// Moves the row `id` of `R`'s table with the compare-and-set `sql` (see `compareAndSet`), audits the
    /// move in the same transaction and returns the row as it is now stored.
    static func transition<R: StoredStateRow>(
        _ type: R.Type,
        _ db: Database,
        id: UUID,
        to: String,
        _ sql: String,
        _ arguments: StatementArguments,
        audit: AuditEvent,
        now: UnixMillis
    ) throws -> R {
        try compareAndSet(db, sql, arguments, table: R.table, stateColumn: R.stateColumn, id: id, what: R.noun, to: to)
        try appendAudit(db, [audit], now: now)
        guard let row = try one(R.self, db, "SELECT * FROM \(R.table) WHERE id = ?", [Self.id(id)]) else { throw RepositoryError.notFound(R.noun) }
        return row
    }

    /// `states` as an SQL list of string literals, for `state IN (…)`; raw values never hold quotes.
    static func sqlList(_ states: Set<ShareState>) -> String {
        states.map { "'\($0.rawValue)'" }.sorted().joined(separator: ",")
    }
}
