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

    /// Prints `value` as JSON on stdout, with every character `printable` would neutralise escaped.
    public static func json<T: Encodable>(_ value: T) throws {
        print(jsonText(try encoder.encode(value)))
    }

    /// Encoded JSON as text safe for a terminal. The encoder escapes C0 controls but passes DEL, C1 controls
    /// and bidirectional marks through raw; outside strings JSON holds only ASCII, so each of those lies in
    /// a string and becomes its `\uXXXX` escape, which every JSON reader turns back into the same text.
    public static func jsonText(_ data: Data) -> String {
        // Every scalar that needs escaping here is DEL or above it: text below 0x7F passes as it is.
        if !data.contains(where: { $0 >= 0x7F }) { return String(decoding: data, as: UTF8.self) }
        var out = String.UnicodeScalarView()
        for scalar in String(decoding: data, as: UTF8.self).unicodeScalars {
            // C0 controls inside strings are already escaped; outside them they are the layout's newlines.
            if scalar.value > 0x1F, isHostile(scalar) {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                out.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// Text from the server or another person (titles, notes, usernames, reasons, messages) made safe
    /// for a terminal or a spreadsheet: control characters (C0, DEL, C1) and the bidirectional and
    /// line-separator marks that reorder or break what follows become visible escapes such as `\u{1B}`
    /// (`\n`, `\r`, `\t` for the common three), so a record cannot redraw, retitle or disguise the screen.
    /// Everything else is kept, and neutralising twice changes nothing.
    public static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isHostile) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where isHostile(scalar): out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether `printable` neutralises `scalar`: C0, DEL and C1 controls, the bidirectional embeddings,
    /// overrides, isolates and marks (U+202A-202E, U+2066-2069, U+200E, U+200F, U+061C), and U+2028/2029.
    static func isHostile(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F, 0x061C, 0x2028, 0x2029: return true
        default: return false
        }
    }

    /// Prints one line for people on stdout, neutralised (`printable`).
    public static func line(_ text: String) {
        print(printable(text))
    }

    /// Prints an aligned table; an empty table prints `empty` instead.
    public static func table(_ headers: [String], _ rows: [[String]], empty: String = "(none)") {
        guard !rows.isEmpty else {
            print(empty)
            return
        }
        let rows = rows.map { $0.map(printable) }
        let headers = headers.map(printable)
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

    /// An audit entry's details as `key=value` pairs in key order. A `doctor` given by a user id found in
    /// `names` (lowercased id to username) is shown by its username.
    public static func details(_ details: [String: String], names: [String: String] = [:]) -> String {
        details.sorted { $0.key < $1.key }.map { key, value in
            let shown = key == "doctor" ? names[value.lowercased()] ?? value : value
            return "\(key)=\(shown)"
        }.joined(separator: " ")
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

    /// A message for people on stderr (so stdout stays clean for --json), neutralised (`printable`).
    public static func note(_ text: String) {
        FileHandle.standardError.write(Data((printable(text) + "\n").utf8))
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
