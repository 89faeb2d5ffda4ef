import Foundation
import VaultCore

/// One SQL statement written once for both engines (Docs/design.md §6): text with its values bound by
/// position, rendered for a `SchemaDialect` (SQLite's `?`, PostgreSQL's `$1`, `$2`, …) and the few clauses
/// that exist on one engine only. Values are interpolated as binds, never as text:
/// `"SELECT * FROM shares WHERE id = \(id)"`; `\(sql:)` splices trusted SQL (a table name, a fixed list).
struct SQLStatement: Sendable, ExpressibleByStringInterpolation {
    /// A bound value with its stored type: SQLite keeps UUIDs as lower-case text, flags as 0 or 1.
    enum Value: Sendable, Equatable {
        case text(String?)
        case int(Int64?)
        case uuid(UUID?)
        case bytes([UInt8]?)
        case bool(Bool?)
    }

    enum Fragment: Sendable {
        case sql(String)
        case bind(Value)
        /// A clause written differently, or only, on one engine (row locks: PostgreSQL's `FOR UPDATE`).
        case dialect(sqlite: String, postgres: String)
    }

    private(set) var fragments: [Fragment]

    init(stringLiteral value: String) { fragments = [.sql(value)] }

    init(stringInterpolation: StringInterpolation) { fragments = stringInterpolation.fragments }

    /// The bound values, in order.
    var values: [Value] {
        fragments.compactMap { if case let .bind(v) = $0 { v } else { nil } }
    }

    /// The text for `dialect`, with its placeholders.
    func text(for dialect: SchemaDialect) -> String {
        var out = ""
        var n = 0
        for f in fragments {
            switch f {
            case let .sql(s): out += s
            case .bind:
                n += 1
                out += dialect == .sqlite ? "?" : "$\(n)"
            case let .dialect(sqlite, postgres): out += dialect == .sqlite ? sqlite : postgres
            }
        }
        return out
    }

    struct StringInterpolation: StringInterpolationProtocol {
        var fragments: [Fragment] = []

        init(literalCapacity: Int, interpolationCount: Int) {}

        mutating func appendLiteral(_ literal: String) { fragments.append(.sql(literal)) }
        mutating func appendInterpolation(_ v: String?) { fragments.append(.bind(.text(v))) }
        mutating func appendInterpolation(_ v: Int64?) { fragments.append(.bind(.int(v))) }
        mutating func appendInterpolation(_ v: UUID?) { fragments.append(.bind(.uuid(v))) }
        mutating func appendInterpolation(_ v: [UInt8]?) { fragments.append(.bind(.bytes(v))) }
        mutating func appendInterpolation(_ v: Bool?) { fragments.append(.bind(.bool(v))) }
        /// Trusted SQL text: a name or a list the code fixes, never a value from a request.
        mutating func appendInterpolation(sql: String) { fragments.append(.sql(sql)) }
        /// Another statement's text and binds, in place.
        mutating func appendInterpolation(_ statement: SQLStatement) { fragments += statement.fragments }
        /// PostgreSQL's `FOR UPDATE` row lock; SQLite's single writer needs none.
        mutating func appendInterpolation(forUpdate: ForUpdate?) {
            guard let forUpdate else { return }
            let clause =
                switch forUpdate {
                case .wait: " FOR UPDATE"
                case .skipLocked: " FOR UPDATE SKIP LOCKED"
                case .noKey: " FOR NO KEY UPDATE"
                }
            fragments.append(.dialect(sqlite: "", postgres: clause))
        }
        /// A clause each engine writes its own way (trusted SQL, like `sql:`).
        mutating func appendInterpolation(sqlite: String, postgres: String) { fragments.append(.dialect(sqlite: sqlite, postgres: postgres)) }
    }

    /// Which row lock a read inside a write takes on PostgreSQL. `noKey` (`FOR NO KEY UPDATE`) lets rows
    /// that merely reference the locked one (a share or a tresor being made) be written meanwhile.
    enum ForUpdate: Sendable { case wait, skipLocked, noKey }

    /// `values` as a parenthesised list of binds, for `IN`; `(NULL)`, which matches nothing, when empty.
    static func list(_ values: [String]) -> SQLStatement {
        guard let first = values.first else { return "(NULL)" }
        var list: SQLStatement = "(\(first)"
        for v in values.dropFirst() { list = "\(list), \(v)" }
        return "\(list))"
    }
}

/// The small interface both engines offer the statements written once: rows decoded by column name, and
/// statements run for the number of rows they changed. Over a GRDB `Database` (inside a write or read)
/// the calls do not suspend; over a postgres-nio connection they do.
protocol SQLConnection {
    var dialect: SchemaDialect { get }
    func rows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> [R]
    func execute(_ statement: SQLStatement) async throws
}

/// A repository's own connection: besides single statements, a flow of them in one write transaction.
/// Every multi-statement write is written once, as a function over the transaction's `SQLConnection`
/// (`AccountFlow`, `ShareFlow`, `AuditSQL.append`, `LoginThrottleSQL.update`), and each backend only says
/// how a transaction is held: one GRDB write on SQLite (`Database.run`), a pooled PostgreSQL connection
/// in `BEGIN`/`COMMIT`.
protocol SQLStore: SQLConnection {
    associatedtype Transaction: SQLConnection & SendableMetatype
    /// Runs `body` in one write transaction: committed when it returns, rolled back when it throws (or its
    /// task is cancelled). A unique constraint broken inside throws `.conflict(conflict)` when `conflict`
    /// is given, else the engine's error.
    func transaction<R: Sendable>(conflict: String?, _ body: @Sendable (Transaction) async throws -> R) async throws -> R
}

extension SQLStore {
    /// Runs `statement` and appends `audit` in one transaction; a unique constraint it would break throws
    /// `.conflict(conflict)`.
    func execute(_ statement: SQLStatement, audit: [AuditEvent], now: UnixMillis, conflict: String) async throws {
        try await transaction(conflict: conflict) { sql in
            try await sql.execute(statement)
            try await AuditSQL.append(sql, audit, now: now)
        }
    }
}

extension SQLConnection {
    /// The first row of `statement`, if any.
    func row<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> R? {
        try await rows(R.self, statement).first
    }
}

/// One integer column named `value`, NULL when no row had one (`SELECT MAX(…) AS value`).
struct StoredNumber: StoredRowDecodable, Sendable {
    var value: Int64?
    init(stored r: some StoredRow) throws { value = try r.optionalInt64("value") }
}

/// One text column named `value`.
struct StoredText: StoredRowDecodable, Sendable {
    var value: String
    init(stored r: some StoredRow) throws { value = try r.string("value") }
}
