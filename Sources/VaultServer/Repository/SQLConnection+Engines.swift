import Foundation
import GRDB
import Logging
import NIOCore
import PostgresNIO
import VaultAPI
import VaultCore

/// SQLite through GRDB: the statement's text is compiled once per connection and kept (every text is one of
/// a fixed set; values are binds). Nothing suspends: the calls run inside a `read` or `write` of the pool.
extension Database: SQLConnection {
    var dialect: SchemaDialect { .sqlite }

    func rows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) throws -> [R] {
        try Row.fetchAll(cachedStatement(sql: statement.text(for: .sqlite)), arguments: statement.sqliteArguments).map { try R(stored: $0) }
    }

    func row<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) throws -> R? {
        try Row.fetchOne(cachedStatement(sql: statement.text(for: .sqlite)), arguments: statement.sqliteArguments).map { try R(stored: $0) }
    }

    func execute(_ statement: SQLStatement) throws {
        try cachedStatement(sql: statement.text(for: .sqlite)).execute(arguments: statement.sqliteArguments)
    }
}

extension SQLStatement {
    /// The binds as SQLite stores them: UUIDs as lower-case text, bytes as BLOBs.
    var sqliteArguments: StatementArguments {
        StatementArguments(
            values.map { v -> (any DatabaseValueConvertible)? in
                switch v {
                case let .text(s): s
                case let .int(i): i
                case let .uuid(u): u?.storedText
                case let .bytes(b): b.map { Data($0) }
                case let .bool(b): b
                }
            }
        )
    }

    /// The statement as postgres-nio sends it.
    var postgresQuery: PostgresQuery {
        var b = PostgresBindings()
        for v in values {
            switch v {
            case let .text(s): if let s { b.append(s) } else { b.appendNull() }
            case let .int(i): if let i { b.append(i) } else { b.appendNull() }
            case let .uuid(u): if let u { b.append(u) } else { b.appendNull() }
            case let .bytes(x): if let x { b.append(ByteBuffer(bytes: x)) } else { b.appendNull() }
            case let .bool(f): if let f { b.append(f) } else { b.appendNull() }
            }
        }
        return PostgresQuery(unsafeSQL: text(for: .postgres), binds: b)
    }
}

/// One postgres-nio connection, inside a transaction of `PostgresRepository.transaction`.
struct PostgresSQL: SQLConnection {
    let connection: PostgresConnection
    let logger: Logger
    var dialect: SchemaDialect { .postgres }

    func rows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> [R] {
        var out: [R] = []
        for try await row in try await connection.query(statement.postgresQuery, logger: logger) { out.append(try R(stored: row.makeRandomAccess())) }
        return out
    }

    func execute(_ statement: SQLStatement) async throws {
        try await connection.query(statement.postgresQuery, logger: logger)
    }
}

/// Outside a transaction, each statement runs on a connection of the pool.
extension PostgresRepository: SQLStore {
    var dialect: SchemaDialect { .postgres }

    func rows<R: StoredRowDecodable & Sendable>(_ type: R.Type, _ statement: SQLStatement) async throws -> [R] {
        try await all(R.self, statement.postgresQuery)
    }

    func execute(_ statement: SQLStatement) async throws {
        try await client.query(statement.postgresQuery, logger: logger)
    }

    func transaction<R: Sendable>(conflict: String?, _ body: @Sendable (PostgresSQL) async throws -> R) async throws -> R {
        do {
            return try await transaction { conn in try await body(PostgresSQL(connection: conn, logger: self.logger)) }
        } catch  where Self.isUniqueViolation(error) {
            guard let conflict else { throw error }
            throw RepositoryError.conflict(conflict)
        }
    }
}
