import Foundation
import GRDB

/// The one SQLite database of an account on this device (`store.sqlite` in its folder): owner-only, and
/// brought up to date by one migrator that lists every migration of the account's role in order. A
/// patient's holds the local store (`LocalStore`), a doctor's the cache of shared records (`DoctorCache`).
/// Identifiers are those the stores were written with, so a home from an earlier version migrates in place;
/// no migration resets a cursor or an accepted commitment unless it says why (a copy it must rebuild).
enum DeviceDatabase {
    /// One migration: its identifier, as recorded in the database, and what it does.
    struct Migration: Sendable {
        let identifier: String
        let migrate: @Sendable (Database) throws -> Void

        init(_ identifier: String, migrate: @escaping @Sendable (Database) throws -> Void) {
            self.identifier = identifier
            self.migrate = migrate
        }

        /// A migration that runs `sql`.
        init(_ identifier: String, sql: String) {
            self.init(identifier) { db in try db.execute(sql: sql) }
        }
    }

    /// Every migration of a patient's database, in order.
    static let patient: [Migration] = [
        LocalStore.firstSchema,
        LocalStore.quarantineTable,
        LocalStore.ledgerTable,
        LocalStore.commitmentTables,
        LocalStore.binaryEnvelopes,
        LocalStore.owedRevocationsTable,
        LocalStore.binaryCommitments,
        LocalStore.keyringTable,
    ]

    /// Every migration of a doctor's database, in order.
    static let doctor: [Migration] = [
        DoctorCache.firstSchema,
        DoctorCache.quarantineTable,
        DoctorCache.revokedTable,
        DoctorCache.commitmentTables,
        DoctorCache.binaryEnvelopes,
        DoctorCache.revokedRequestsTable,
        DoctorCache.binaryCommitments,
        DoctorCache.quarantineByTresor,
        DoctorCache.pendingTable,
        DoctorCache.parkedTable,
    ]

    /// The configuration of both device databases (the patient's store and the doctor's cache): WAL with
    /// NORMAL sync, so a commit appends to the log without waiting for the disk (a crash loses at most the
    /// last transactions, never consistency; the doctor's cache is rebuilt from the server in any case), and
    /// a wait of 10 s for another process's transaction (`watch` beside `show`, say). `pageSize` applies to
    /// a database created with it only (SQLite keeps the size a database was created with in WAL mode).
    /// With `logLimit`, the log is cut back to that many bytes each time it starts over.
    static func walConfiguration(pageSize: Int? = nil, logLimit: Int? = nil) -> Configuration {
        var config = Configuration()
        config.busyMode = .timeout(10)
        let pageSize = pageSize.map { "PRAGMA page_size = \($0); " } ?? ""
        let logLimit = logLimit.map { "; PRAGMA journal_size_limit = \($0)" } ?? ""
        config.prepareDatabase { db in
            try db.execute(sql: pageSize + "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL" + logLimit)
        }
        return config
    }

    /// The page size of the doctor's cache, 64 KiB (SQLite's largest; 4 KiB by default): a share's records
    /// arrive a page of a pull at a time and are written in large transactions, where each database page
    /// costs about two system calls to the log, and an envelope of 16 KiB fits in one page instead of a
    /// chain of five. Measured in Docs/benchmarks.md §3; the patient's store, written a record at a time,
    /// keeps SQLite's default.
    static let cachePageSize = 65_536

    /// What the doctor's cache keeps of its log on disk once the log starts over: 16 MiB. With pages of 64
    /// KiB, SQLite's checkpoint every 1,000 pages lets the log grow to about 64 MiB, and a log is reused,
    /// not cut back, unless told to.
    static let cacheLogLimit = 16 * 1024 * 1024

    /// Runs `body` in one transaction committed with `synchronous = FULL`, so it survives a power cut (a
    /// database in `walConfiguration` commits with NORMAL otherwise).
    static func writeDurably(_ queue: DatabaseQueue, _ body: (Database) throws -> Void) throws {
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            defer { try? db.execute(sql: "PRAGMA synchronous = NORMAL") }
            try db.inTransaction {
                try body(db)
                return .commit
            }
        }
    }

    /// The one migrator of `migrations`.
    static func migrator(_ migrations: [Migration]) -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for m in migrations { migrator.registerMigration(m.identifier, migrate: m.migrate) }
        return migrator
    }

    /// Opens (creating it where missing) the owner-only database at `url` and runs the migrations of
    /// `migrations` it has not run yet, each in its own transaction.
    static func open(at url: URL, configuration: Configuration = Configuration(), migrations: [Migration]) throws -> DatabaseQueue {
        try SecureFiles.ensureDirectory(url.deletingLastPathComponent())
        let queue = try DatabaseQueue(path: url.path, configuration: configuration)
        try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
        let migrator = migrator(migrations)
        // A database a newer version migrated may mean what this version cannot read (a doctor's first read
        // parked among the heads, Docs/commitment-pages.md §8, reads as authenticated heads to a version
        // before it): refused, not misread.
        guard try !queue.read({ db in try migrator.hasBeenSuperseded(db) }) else {
            throw ClientError.localState(
                "\(url.lastPathComponent) was written by a newer version of CareVault; update this tool, or remove it and sign in again"
            )
        }
        try migrator.migrate(queue)
        // The database and, in WAL mode, its log and index, owner-only whatever the umask (the folder is too).
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: url.path + suffix) {
            try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path + suffix)
        }
        return queue
    }
}
