import Foundation
import GRDB
import VaultAPI
import VaultCore
import VaultCrypto
import VaultSQLite

/// The embedded default backend: SQLite through GRDB, one database file, WAL mode so reads run beside
/// the single writer. SQLite serialises writers, which is what keeps change sequences gap-free.
public final class SQLiteRepository: VaultRepository, SQLAccountStore, SQLLoginThrottleStore, SQLShareStore, SQLAuditStore,
    SQLListingStore, SQLRetentionStore, SQLIdempotencyStore
{
    public let backendName = "sqlite"
    /// The single writer's store of one chunk runs beside the checks of the next (Docs/benchmarks.md §2).
    public let streamsPushes = true
    let pool: DatabasePool
    /// Moves the WAL's checkpoints out of the pushes' commits (see `WALCheckpointer`).
    let checkpointer: WALCheckpointer

    /// Opens (creating if needed) the database at `path`; its folder is created too.
    public init(path: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        var config = Configuration()
        config.foreignKeysEnabled = true
        // A lock held longer than this is an outage to report (503 with Retry-After), not a request to hold.
        config.busyMode = .timeout(5)
        let checkpointer = WALCheckpointer(path: url.path)
        config.prepareDatabase { db in checkpointer.install(on: db) }
        self.checkpointer = checkpointer
        pool = try DatabasePool(path: path, configuration: config)
    }

    // MARK: Schema

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        for migration in Schema.migrations(.sqlite) {
            // A migration with nothing to run for SQLite needs no foreign-key check of the whole database.
            m.registerMigration(migration.id, foreignKeyChecks: migration.statements.isEmpty ? .immediate : .deferred) { db in
                for statement in migration.statements { try db.execute(sql: statement) }
                if let compute = migration.compute { try db.run { db in try await compute(db) } }
            }
        }
        return m
    }

    /// Migrates on the pool's writer (GRDB's own queue), not on the calling task's thread: a migration
    /// is dozens of statements and a foreign-key check of the whole database, too long to hold a thread of
    /// the cooperative pool.
    public func migrate() async throws {
        let migrator = Self.migrator
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            migrator.asyncMigrate(pool) { result in done.resume(with: result.map { _ in () }) }
        }
        try await pool.write { db in
            if try Row.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'server_secret'") == nil {
                try db.execute(sql: "INSERT INTO meta (key, value) VALUES ('server_secret', ?)", arguments: [Data(RandomBytes.bytes(count: 32))])
            }
        }
    }

    public func appliedMigrations() async throws -> Set<String> {
        try await pool.read { db in try Self.migrator.appliedIdentifiers(db) }
    }

    public func serverSecret() async throws -> [UInt8] {
        try await pool.read { db in
            guard let data = try Data.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'server_secret'") else {
                throw RepositoryError.notFound("server secret (database not migrated)")
            }
            return Array(data)
        }
    }

    public func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    /// Runs raw SQL outside the repository's rules: for maintenance, and for tests that play an attacker
    /// with write access to the database.
    public func executeRawSQL(_ sql: String) async throws {
        try await pool.write { db in try db.execute(sql: sql) }
    }

    // MARK: Shared helpers

    static func id(_ uuid: UUID) -> String { uuid.storedText }

    static func isUniqueViolation(_ error: Error) -> Bool {
        guard let e = error as? DatabaseError else { return false }
        return e.resultCode == .SQLITE_CONSTRAINT
            && (e.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE || e.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY)
    }
}

/// SQLite keeps UUIDs as lower-case text, flags as 0 or 1 and bytes as BLOBs.
/// Every read throws, never traps: a value of another type edited into a column (text where a number is
/// kept, say) fails the request, not the process. GRDB's subscripts would stop the process.
extension Row: StoredRow {
    /// `column`'s value, nil for NULL; a value that does not convert to `T` is an error.
    func checked<T: DatabaseValueConvertible>(_ column: String, as type: T.Type = T.self) throws -> T? {
        do { return try decode(T?.self, forColumn: column) } catch {
            throw StoredNumberOutOfRange(what: column, value: "of another type")
        }
    }

    func string(_ column: String) throws -> String {
        guard let value = try checked(column, as: String.self) else { throw RepositoryError.notFound("no \(column)") }
        return value
    }

    func optionalString(_ column: String) throws -> String? { try checked(column) }

    func int64(_ column: String) throws -> Int64 {
        guard let value = try checked(column, as: Int64.self) else { throw RepositoryError.notFound("no \(column)") }
        return value
    }

    func optionalInt64(_ column: String) throws -> Int64? { try checked(column) }

    func uuid(_ column: String) throws -> UUID {
        guard let text = try checked(column, as: String.self), let id = UUID(uuidString: text) else {
            throw RepositoryError.notFound("bad uuid in \(column)")
        }
        return id
    }

    func optionalUUID(_ column: String) throws -> UUID? { try checked(column, as: String.self).flatMap(UUID.init(uuidString:)) }

    func bool(_ column: String) throws -> Bool {
        guard let value = try checked(column, as: Bool.self) else { throw RepositoryError.notFound("no \(column)") }
        return value
    }

    func bytes(_ column: String) throws -> [UInt8] {
        guard let value = try checked(column, as: Data.self) else { throw RepositoryError.notFound("no \(column)") }
        return Array(value)
    }
}
