import Foundation
import GRDB
import VaultTestSupport

extension ServerOperator {
    /// The operator of the SQLite file at `path`, which a server process has open beside it (WAL): each edit
    /// waits out the server's writes instead of failing.
    static func sqliteFile(_ path: String) -> ServerOperator {
        ServerOperator(backend: .sqlite) { sql in
            var config = Configuration()
            config.busyMode = .timeout(5)
            try await DatabaseQueue(path: path, configuration: config).write { try $0.execute(sql: sql) }
        }
    }

    /// The operator of a test server's database, on either backend (psql for PostgreSQL).
    static func of(_ database: ServerDatabase) -> ServerOperator {
        if let path = database.sqlitePath { return sqliteFile(path) }
        let url = database.url
        return ServerOperator(backend: .postgres) { sql in _ = try await ServerDatabase.psql(url, sql) }
    }
}
