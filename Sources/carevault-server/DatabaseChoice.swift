import ArgumentParser
import Foundation

/// Which database the server uses (Docs/operations.md §4): `--database`, else `CAREVAULT_DATABASE_URL`,
/// else the SQLite file `data/carevault.sqlite` under the working directory. That default is never taken
/// silently where the environment names PostgreSQL: a URL lost on its way (an env file line cut at an
/// unquoted `&`) would otherwise start the service on a new, empty database.
enum DatabaseChoice {
    static let defaultURL = "sqlite:data/carevault.sqlite"

    /// PostgreSQL's own client variables: set, they say the deployment means PostgreSQL.
    static let postgresVariables = ["PGHOST", "PGHOSTADDR", "PGDATABASE", "PGSERVICE", "PGUSER", "PGPORT"]

    /// The URL to use, or a usage error (exit 64) naming the variable that names PostgreSQL (never its value,
    /// which may hold a password).
    static func url(option: String?, environment env: [String: String]) throws -> String {
        if let given = option ?? env["CAREVAULT_DATABASE_URL"] { return given }
        if let name = postgresNamed(env) {
            FileHandle.standardError.write(
                Data(
                    ("carevault-server: error: no database URL was given (--database, CAREVAULT_DATABASE_URL), but \(name) names "
                        + "PostgreSQL: refusing to start on a new, empty SQLite database\n"
                        + "hint: give the URL with --database or CAREVAULT_DATABASE_URL, quoted in an env file or shell (an unquoted & "
                        + "ends it there); for SQLite after all, give --database sqlite:PATH (Docs/operations.md §4)\n").utf8
                )
            )
            throw ExitCode(64)
        }
        return defaultURL
    }

    /// The first variable of `env` that names PostgreSQL: one of libpq's, or `DATABASE_URL` (the name
    /// many deployments use) holding a PostgreSQL URL.
    static func postgresNamed(_ env: [String: String]) -> String? {
        if let name = postgresVariables.first(where: { !(env[$0] ?? "").isEmpty }) { return name }
        let url = env["DATABASE_URL"]?.lowercased() ?? ""
        return url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") ? "DATABASE_URL" : nil
    }

    /// Where `url` keeps the data, for the start-up line: the SQLite file's absolute path, or PostgreSQL's
    /// host, port and database (never the user's password).
    static func describe(_ url: String) -> String {
        if url.hasPrefix("sqlite:") {
            let path = String(url.dropFirst("sqlite:".count))
            if path == ":memory:" { return "SQLite in memory" }
            let absolute = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
            return "SQLite at \(absolute.standardizedFileURL.path)" + (url == defaultURL ? " (the default)" : "")
        }
        guard let parts = URLComponents(string: url), let host = parts.host else { return "PostgreSQL" }
        return "PostgreSQL at \(host):\(parts.port ?? 5432)\(parts.path.isEmpty ? "" : parts.path)"
    }
}
