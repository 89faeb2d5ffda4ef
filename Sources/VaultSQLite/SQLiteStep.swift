import Foundation
import GRDB
import GRDBSQLite

/// A cached statement bound, stepped and read through SQLite's C API, for the statements run once per
/// record of a push (on the server and on the patient's device) or of a pull (the doctor's cache). There,
/// GRDB's argument arrays of existentials and its row objects cost more than SQLite's own work (the
/// profiles in Docs/benchmarks.md §2 and §3).
/// Failures are GRDB's `DatabaseError`, as everywhere else. Use only inside a transaction GRDB opened; the
/// statement is reset before each use and after the last.
public struct SQLiteStep {
    private let db: Database
    /// Held so the handle stays valid even if GRDB's statement cache lets go of it meanwhile.
    private let statement: Statement
    private var handle: SQLiteStatement { statement.sqliteStatement }

    public init(_ db: Database, sql: String) throws {
        self.db = db
        statement = try db.cachedStatement(sql: sql)
    }

    /// Binds `values` to the parameters 1, 2, … after resetting the statement.
    public func bind(_ values: Value...) throws {
        // A statement still stepping belongs to an enclosing use of the same SQL (one cached statement):
        // resetting it would cut that use's row short. Refused instead.
        guard sqlite3_stmt_busy(handle) == 0 else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "statement already in use", sql: String(cString: sqlite3_sql(handle)))
        }
        sqlite3_reset(handle)
        for (i, value) in values.enumerated() {
            let index = Int32(i + 1)
            let code: Int32
            switch value {
            case let .text(s): code = sqlite3_bind_text(handle, index, s, -1, Self.transient)
            case let .int(n): code = sqlite3_bind_int64(handle, index, n)
            case .null: code = sqlite3_bind_null(handle, index)
            case let .blob(bytes): code = bytes.withUnsafeBytes { bindBlob($0, at: index) }
            case let .data(bytes): code = bytes.withUnsafeBytes { bindBlob($0, at: index) }
            }
            guard code == SQLITE_OK else { throw failure(code) }
        }
    }

    private func bindBlob(_ raw: UnsafeRawBufferPointer, at index: Int32) -> Int32 {
        // Empty bytes may have no address; SQLite would store NULL for them.
        raw.baseAddress.map { sqlite3_bind_blob(handle, index, $0, Int32(raw.count), Self.transient) } ?? sqlite3_bind_zeroblob(handle, index, 0)
    }

    /// One step: true when it produced a row (read it with `int`/`text`), false when the statement is done.
    public func step() throws -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            sqlite3_reset(handle)
            throw failure(code)
        }
    }

    /// Leaves the statement reset (its read, if any, ended).
    public func finish() { sqlite3_reset(handle) }

    /// Whether `column` of the current row is NULL.
    public func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    /// The integer in `column` of the current row; a NULL is an error.
    public func int(_ column: Int32) throws -> Int64 {
        guard !isNull(column) else { throw missing(column) }
        return sqlite3_column_int64(handle, column)
    }

    /// The text in `column` of the current row; a NULL is an error.
    public func text(_ column: Int32) throws -> String {
        guard let c = sqlite3_column_text(handle, column) else { throw missing(column) }
        return String(cString: c)
    }

    /// The integer in `column` of the current row, nil for a NULL.
    public func optionalInt(_ column: Int32) -> Int64? { isNull(column) ? nil : sqlite3_column_int64(handle, column) }

    /// The text in `column` of the current row, nil for a NULL.
    public func optionalText(_ column: Int32) -> String? { sqlite3_column_text(handle, column).map { String(cString: $0) } }

    /// A value to bind.
    public enum Value: Sendable {
        case text(String)
        case int(Int64)
        case blob([UInt8])
        /// A blob from `Data`, bound without a copy into an array.
        case data(Data)
        case null
    }

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    private func missing(_ column: Int32) -> DatabaseError {
        DatabaseError(resultCode: .SQLITE_MISMATCH, message: "no value in column \(column)", sql: String(cString: sqlite3_sql(handle)))
    }

    private func failure(_ code: Int32) -> DatabaseError {
        DatabaseError(
            resultCode: ResultCode(rawValue: code),
            message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
            sql: String(cString: sqlite3_sql(handle))
        )
    }
}
