import Foundation
import PostgresNIO

/// PostgreSQL answered a statement of the server's own with an error (Docs/operations.md §4): the
/// database's own words, its SQLSTATE, and what to do about it, instead of postgres-nio's generic
/// description. Such an answer does not change by trying again; the server stops with `exitStatus`.
public struct DatabaseRefusal: Error, CustomStringConvertible, Sendable {
    /// What the server was doing ("the migration").
    public var during: String
    /// PostgreSQL's message, as it gave it.
    public var message: String
    /// The five-character SQLSTATE, when given.
    public var sqlState: String?
    /// PostgreSQL's own hint, when given.
    public var serverHint: String?

    /// `error` as a refusal when it is one PostgreSQL answered (a statement's error, not a lost connection).
    public init?(_ error: any Error, during: String) {
        guard let psql = error as? PSQLError, let message = psql.serverInfo?[.message] else { return nil }
        self.during = during
        self.message = message
        self.sqlState = psql.serverInfo?[.sqlState]
        self.serverHint = psql.serverInfo?[.hint]
    }

    public var description: String {
        "PostgreSQL refused \(during): \(message)" + (sqlState.map { " (SQLSTATE \($0))" } ?? "")
    }

    /// What to do, in plain words.
    public var hint: String {
        switch sqlState {
        case "42501":
            // PostgreSQL 15 no longer lets every role create tables in schema public; GRANT ALL ON DATABASE does not.
            "the server's role must be able to create tables in schema public: make it the database's owner "
                + "(createdb -O carevault carevault), or run GRANT CREATE ON SCHEMA public TO carevault as the owner "
                + "(Docs/operations.md §4)"
        case "3D000": "create the database first (createdb -O carevault carevault), or fix its name in the database URL"
        default: serverHint ?? "see the PostgreSQL server's log for the statement that failed"
        }
    }

    /// 77 (not permitted) for a missing privilege, 69 (unavailable) otherwise.
    public var exitStatus: Int32 { sqlState?.hasPrefix("42501") == true ? 77 : 69 }
}
