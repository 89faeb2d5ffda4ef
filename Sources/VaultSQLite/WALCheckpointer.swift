import Foundation
import GRDB
import GRDBSQLite

/// Copies a WAL database's log back into the database file on a background thread, instead of inside the
/// commit that crossed SQLite's auto-checkpoint threshold.
///
/// SQLite's default checkpoints once the log holds 1,000 pages, synchronously, in the committing
/// connection. On the server that is a push's transaction: about every second batch of 500 envelopes
/// paid for copying the log and syncing the file, which doubled that batch's store time and held the
/// single writer meanwhile (Docs/benchmarks.md §2). Here the writer's commit hook only asks for a
/// checkpoint; a connection of the checkpointer's own runs it (PASSIVE: it waits for no reader and no
/// writer, so the writer goes on appending while it copies). A PASSIVE checkpoint copies only the frames
/// written before it began, and the log starts again from its beginning only when a commit finds every
/// frame copied: under writes that never pause it grows. Past `blockingPages` the committing connection
/// therefore runs a RESTART checkpoint itself, which waits for the background one and for readers, so the
/// log's file stays near `blockingPages` pages at most (the file is reused, not shrunk).
///
/// Install it with `install(on:)` from `Configuration.prepareDatabase` of every connection of one
/// database; the configuration then keeps the checkpointer alive as long as any connection that can call
/// it. Its own connection is opened for each checkpoint and closed after it, so it holds no file open
/// between checkpoints and never creates a database that was removed meanwhile.
public final class WALCheckpointer: @unchecked Sendable {
    /// The log size, in pages, at which a checkpoint is requested (SQLite's own default threshold).
    public let pages: Int32
    /// The log size at which the committing connection checkpoints itself.
    public let blockingPages: Int32
    private let path: String
    private let queue = DispatchQueue(label: "carevault.sqlite.checkpoint", qos: .utility)
    private let lock = NSLock()
    private var running = false
    private var again = false
    private var completedCount = 0

    public init(path: String, pages: Int32 = 1_000, blockingPages: Int32 = 16_000) {
        self.path = path
        self.pages = max(1, pages)
        self.blockingPages = max(self.pages, blockingPages)
    }

    /// Replaces SQLite's auto-checkpoint of `db` by this checkpointer's commit hook.
    public func install(on db: Database) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        sqlite3_wal_hook(
            db.sqliteConnection,
            { context, connection, _, logPages in
                guard let context else { return SQLITE_OK }
                let checkpointer = Unmanaged<WALCheckpointer>.fromOpaque(context).takeUnretainedValue()
                if logPages >= checkpointer.blockingPages {
                    // RESTART waits (up to the connection's busy timeout) for the background checkpoint and for
                    // readers of old frames, copies every frame and makes the next commit start the log from
                    // its beginning: a PASSIVE one would give up while the background one holds the lock,
                    // and under writes that never pause the log would go on growing.
                    _ = sqlite3_wal_checkpoint_v2(connection, nil, SQLITE_CHECKPOINT_RESTART, nil, nil)
                } else if logPages >= checkpointer.pages {
                    checkpointer.request()
                }
                return SQLITE_OK
            },
            context
        )
    }

    /// How many background checkpoints have run (whether or not they could copy every page: PASSIVE stops
    /// at a frame a reader's snapshot still needs).
    public var completed: Int { lock.withLock { completedCount } }

    /// Whether a checkpoint is running or asked for.
    public var busy: Bool { lock.withLock { running } }

    /// Asks for a checkpoint: one starts now, or runs again after the one under way.
    func request() {
        let start: Bool = lock.withLock {
            if running {
                again = true
                return false
            }
            running = true
            return true
        }
        if start { queue.async { self.run() } }
    }

    private func run() {
        while true {
            let ran = checkpoint()
            let more: Bool = lock.withLock {
                if ran { completedCount += 1 }
                if again {
                    again = false
                    return true
                }
                running = false
                return false
            }
            if !more { return }
        }
    }

    /// One PASSIVE checkpoint through a connection of its own; whether it ran. Failures are left for the
    /// next request (or the blocking fallback): a busy checkpointer, a file removed since, a full disk.
    private func checkpoint() -> Bool {
        var connection: OpaquePointer?
        defer { sqlite3_close_v2(connection) }
        guard sqlite3_open_v2(path, &connection, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK else { return false }
        sqlite3_busy_timeout(connection, 0)
        // A new connection knows the file is in WAL mode only once it has read from it; until then the
        // checkpoint does nothing and reports no log (-1).
        guard sqlite3_exec(connection, "SELECT count(*) FROM sqlite_master", nil, nil, nil) == SQLITE_OK else { return false }
        var logFrames: Int32 = -1
        let rc = sqlite3_wal_checkpoint_v2(connection, nil, SQLITE_CHECKPOINT_PASSIVE, &logFrames, nil)
        return rc == SQLITE_OK && logFrames >= 0
    }
}
