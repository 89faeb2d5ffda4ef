/// The shape of a migrated database as its engine reports it, without the engine's own column types, so the
/// two backends can be compared with each other and with the schema they were meant to get (Docs/design.md §6).
/// Migration bookkeeping tables (`grdb_migrations`, `schema_migrations`) are left out.
struct SchemaCatalog: Equatable, Sendable {
    struct Column: Equatable, Sendable {
        var name: String
        /// Declared NOT NULL or part of the primary key (PostgreSQL makes key columns NOT NULL; SQLite reports them apart).
        var notNull: Bool
    }

    /// An index made by CREATE INDEX (not one that only backs a key or UNIQUE constraint).
    struct Index: Equatable, Sendable {
        var table: String
        var columns: [String]
        var unique: Bool
        var partial: Bool
    }

    /// Columns per table, in declaration order.
    var tables: [String: [Column]] = [:]
    var primaryKeys: [String: [String]] = [:]
    /// UNIQUE constraints per table, each as its columns; sorted so the order the engine lists them in does not matter.
    var uniqueConstraints: [String: [[String]]] = [:]
    /// Named indexes by name.
    var indexes: [String: Index] = [:]

    mutating func addUnique(_ table: String, _ columns: [String]) {
        uniqueConstraints[table, default: []].append(columns)
        uniqueConstraints[table]?.sort { $0.joined(separator: ",") < $1.joined(separator: ",") }
    }
}
