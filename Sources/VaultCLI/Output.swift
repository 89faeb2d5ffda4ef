import Foundation
import VaultClient

/// What the tools print: aligned tables and local dates for people, sorted JSON with `--json`.
public enum Output {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        e.dateEncodingStrategy = .iso8601
        return e
    }()

    /// Prints `value` as JSON on stdout.
    public static func json<T: Encodable>(_ value: T) throws {
        print(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    /// Text from other people (titles, notes, values) made safe for a terminal: control characters,
    /// escape sequences among them, become U+FFFD so a record cannot redraw or recolour the screen.
    public static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { $0.properties.generalCategory == .control ? "\u{FFFD}" : $0 }))
    }

    /// Prints an aligned table; an empty table prints `empty` instead.
    public static func table(_ headers: [String], _ rows: [[String]], empty: String = "(none)") {
        guard !rows.isEmpty else {
            print(empty)
            return
        }
        let rows = rows.map { $0.map(printable) }
        var widths = headers.map(\.count)
        for row in rows { for (i, cell) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], cell.count) } }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { i, c in i == cells.count - 1 ? c : c.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ")
        }
        print(line(headers))
        print(line(widths.map { String(repeating: "-", count: $0) }))
        for row in rows { print(line(row)) }
    }

    /// With `--json` prints `value` as JSON; else an aligned table of `rows`, or `empty` when there are none.
    /// The rows are only built for people, so a JSON caller never pays for them.
    public static func show<T: Encodable>(
        _ value: T,
        json: Bool,
        headers: [String],
        empty: String = "(none)",
        rows: () async throws -> [[String]]
    ) async throws {
        if json {
            try Output.json(value)
        } else {
            table(headers, try await rows(), empty: empty)
        }
    }

    /// An audit entry's details as `key=value` pairs in key order.
    public static func details(_ details: [String: String]) -> String {
        details.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
    }

    /// A date in local time for people.
    public static func date(_ d: Date, time: Bool = true) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = .current
        f.dateFormat = time ? "yyyy-MM-dd HH:mm" : "yyyy-MM-dd"
        return f.string(from: d)
    }

    /// A Unix-milliseconds time in local time.
    public static func date(millis: Int64) -> String { date(Date(timeIntervalSince1970: Double(millis) / 1000)) }

    /// A message for people on stderr (so stdout stays clean for --json).
    public static func note(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}

/// A one-line progress display on stderr, drawn only when stderr is a terminal.
public final class ProgressLine: @unchecked Sendable {
    private let enabled = Terminal.stderrIsTerminal
    private let lock = NSLock()
    private var last = ""

    public init() {}

    public func update(_ text: String) {
        guard enabled else { return }
        lock.lock()
        defer { lock.unlock() }
        let padded = text.padding(toLength: max(text.count, last.count), withPad: " ", startingAt: 0)
        FileHandle.standardError.write(Data(("\r" + padded).utf8))
        last = text
    }

    public func finish() {
        guard enabled, !last.isEmpty else { return }
        FileHandle.standardError.write(Data(("\r" + String(repeating: " ", count: last.count) + "\r").utf8))
        last = ""
    }

    /// A sync progress callback that draws a bar for pushes and a counter for pulls.
    public var syncCallback: @Sendable (SyncProgress) -> Void {
        { [self] p in
            switch (p.phase, p.total) {
            case let (.push, total?) where total > 0:
                let width = 24
                let filled = min(width, p.done * width / total)
                update("sync: push [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(p.done)/\(total)")
            case (.pull, _): update("sync: pulled \(p.done)")
            default: update("sync: \(p.phase.rawValue)…")
            }
        }
    }
}
