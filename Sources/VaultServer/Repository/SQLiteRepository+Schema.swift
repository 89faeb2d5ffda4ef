import GRDB

extension SQLiteRepository {
    /// What the database holds, read from sqlite_master and the table_info, index_list and index_info pragmas.
    func schemaCatalog() async throws -> SchemaCatalog {
        try await pool.read { db in
            var catalog = SchemaCatalog()
            let tables = try String.fetchAll(
                db,
                sql: """
                    SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'grdb_migrations'
                    """
            )
            for table in tables {
                let columns = try Row.fetchAll(db, sql: #"SELECT name, "notnull", pk FROM pragma_table_info(?) ORDER BY cid"#, arguments: [table])
                catalog.tables[table] = columns.map {
                    SchemaCatalog.Column(name: $0["name"], notNull: ($0["notnull"] as Int) != 0 || ($0["pk"] as Int) > 0)
                }
                let key = columns.filter { ($0["pk"] as Int) > 0 }.sorted { ($0["pk"] as Int) < ($1["pk"] as Int) }
                catalog.primaryKeys[table] = key.map { $0["name"] }
                for index in try Row.fetchAll(db, sql: #"SELECT name, "unique", origin, partial FROM pragma_index_list(?)"#, arguments: [table]) {
                    let name: String = index["name"]
                    let indexed = try String.fetchAll(db, sql: "SELECT name FROM pragma_index_info(?) ORDER BY seqno", arguments: [name])
                    switch index["origin"] as String {
                    case "c":
                        catalog.indexes[name] = SchemaCatalog.Index(
                            table: table,
                            columns: indexed,
                            unique: index["unique"],
                            partial: index["partial"]
                        )
                    case "u":
                        catalog.addUnique(table, indexed)
                    default:
                        break
                    }
                }
            }
            return catalog
        }
    }
}
