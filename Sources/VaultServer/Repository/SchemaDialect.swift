/// What differs between the two engines' DDL: column types and how a table is made append-only
/// (Docs/design.md §6). Everything else in `Schema` is written once for both.
enum SchemaDialect: Sendable, CaseIterable {
    case sqlite
    case postgres

    /// Free text.
    var text: String { "TEXT" }

    /// A UUID: SQLite keeps the lower-case string, PostgreSQL its native type.
    var uuid: String {
        switch self {
        case .sqlite: "TEXT"
        case .postgres: "UUID"
        }
    }

    /// A 64-bit integer (times, sequences, epochs).
    var int64: String {
        switch self {
        case .sqlite: "INTEGER"
        case .postgres: "BIGINT"
        }
    }

    /// A 32-bit integer (the single-row key of `audit_head`).
    var int32: String {
        switch self {
        case .sqlite: "INTEGER"
        case .postgres: "INT"
        }
    }

    /// A flag: SQLite has no boolean type and stores 0 or 1.
    var bool: String {
        switch self {
        case .sqlite: "INTEGER"
        case .postgres: "BOOLEAN"
        }
    }

    /// Raw bytes.
    var bytes: String {
        switch self {
        case .sqlite: "BLOB"
        case .postgres: "BYTEA"
        }
    }

    /// A table whose rows may be inserted but never updated or deleted, and the name its guard goes by.
    struct AppendOnly {
        var trigger: String
        var table: String
        /// What SQLite reports; PostgreSQL's shared function names the table itself.
        var message: String
    }

    /// The statements that make `tables` append-only. Trigger names are part of the schema: tests (and
    /// operators) disable them by name, so they stay as first shipped. PostgreSQL's shared trigger
    /// function is defined once, by the first migration; later ones pass `defineFunction: false`.
    func appendOnlyTriggers(_ tables: [AppendOnly], defineFunction: Bool = true) -> [String] {
        switch self {
        case .sqlite:
            tables.flatMap { t in
                [("u", "UPDATE"), ("d", "DELETE")].map { suffix, event in
                    "CREATE TRIGGER \(t.trigger)_\(suffix) BEFORE \(event) ON \(t.table) BEGIN SELECT RAISE(ABORT, '\(t.message)'); END"
                }
            }
        case .postgres:
            (defineFunction
                ? [
                    """
                    CREATE FUNCTION carevault_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$
                    """
                ] : [])
                + tables.map { t in
                    "CREATE TRIGGER \(t.trigger) BEFORE UPDATE OR DELETE ON \(t.table) FOR EACH ROW EXECUTE FUNCTION carevault_append_only()"
                }
        }
    }
}
