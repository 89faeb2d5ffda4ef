import PostgresNIO

extension PostgresRepository {
    /// What the database holds, read from information_schema.columns and the pg_index catalog (the index
    /// definitions pg_indexes shows as text, as columns).
    func schemaCatalog() async throws -> SchemaCatalog {
        var catalog = SchemaCatalog()
        for try await row in try await client.query(
            """
            SELECT table_name::text AS table_name, column_name::text AS column_name, is_nullable::text AS is_nullable
            FROM information_schema.columns WHERE table_schema = current_schema() AND table_name <> 'schema_migrations'
            ORDER BY table_name, ordinal_position
            """,
            logger: logger
        ) {
            let r = row.makeRandomAccess()
            let column = SchemaCatalog.Column(
                name: try r["column_name"].decode(String.self),
                notNull: try r["is_nullable"].decode(String.self) == "NO"
            )
            catalog.tables[try r["table_name"].decode(String.self), default: []].append(column)
        }
        for try await row in try await client.query(
            """
            SELECT t.relname::text AS table_name, i.relname::text AS index_name, ix.indisunique AS is_unique, ix.indisprimary AS is_primary,
                   ix.indpred IS NOT NULL AS is_partial, EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = ix.indexrelid) AS backs_constraint,
                   ARRAY(SELECT a.attname::text FROM unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                         JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum ORDER BY k.ord) AS columns
            FROM pg_index ix JOIN pg_class i ON i.oid = ix.indexrelid JOIN pg_class t ON t.oid = ix.indrelid
                 JOIN pg_namespace n ON n.oid = t.relnamespace
            WHERE n.nspname = current_schema() AND t.relname <> 'schema_migrations'
            """,
            logger: logger
        ) {
            let r = row.makeRandomAccess()
            let table = try r["table_name"].decode(String.self)
            let columns = try r["columns"].decode([String].self)
            if try r["is_primary"].decode(Bool.self) {
                catalog.primaryKeys[table] = columns
            } else if try r["backs_constraint"].decode(Bool.self) {
                catalog.addUnique(table, columns)
            } else {
                catalog.indexes[try r["index_name"].decode(String.self)] = SchemaCatalog.Index(
                    table: table,
                    columns: columns,
                    unique: try r["is_unique"].decode(Bool.self),
                    partial: try r["is_partial"].decode(Bool.self)
                )
            }
        }
        return catalog
    }
}
