import Foundation

/// Timing and statistics helpers. Every figure is timed with `ContinuousClock`.
enum Measure {
    static let clock = ContinuousClock()

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) * 1e-18
    }

    /// Seconds since `start`.
    static func since(_ start: ContinuousClock.Instant) -> Double { seconds(clock.now - start) }

    /// Runs `body` once and returns its result with the elapsed seconds.
    static func time<T>(_ body: () throws -> T) rethrows -> (T, Double) {
        let start = clock.now
        let value = try body()
        return (value, since(start))
    }

    /// Runs the async `body` once and returns its result with the elapsed seconds.
    static func timeAsync<T>(_ body: () async throws -> T) async rethrows -> (T, Double) {
        let start = clock.now
        let value = try await body()
        return (value, since(start))
    }

    /// The median (the mean of the two middle values for an even count); NaN when empty.
    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return .nan }
        let s = values.sorted()
        return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }

    /// The nearest-rank percentile `p` (0...100) of already sorted values; NaN when empty.
    static func percentile(sorted s: [Double], _ p: Double) -> Double {
        guard !s.isEmpty else { return .nan }
        let rank = Int((p / 100 * Double(s.count)).rounded(.up))
        return s[min(max(rank, 1), s.count) - 1]
    }

    /// Rounds to `digits` decimals (for output).
    static func round(_ x: Double, _ digits: Int) -> Double {
        guard x.isFinite else { return x }
        let f = pow(10, Double(digits))
        return (x * f).rounded() / f
    }
}

/// Memory as the kernel reports it (/proc/PID/status): of this process, or of a server process.
enum ProcessMemory {
    /// Resets the peak RSS (VmHWM) of `pid` (this process by default) to its current RSS
    /// (`echo 5 > /proc/PID/clear_refs`, Linux 4.0+). False when the kernel refused, in which case VmHWM
    /// stays the lifetime peak.
    @discardableResult
    static func resetPeak(pid: Int32? = nil) -> Bool {
        guard let handle = FileHandle(forWritingAtPath: "/proc/\(pid.map(String.init) ?? "self")/clear_refs") else { return false }
        defer { try? handle.close() }
        do { try handle.write(contentsOf: Data("5".utf8)) } catch { return false }
        return true
    }

    /// Current resident set size (VmRSS) of this process in MiB.
    static func currentMiB() -> Double? { field("VmRSS:") }

    /// A size field of /proc/PID/status (this process by default) in MiB.
    static func field(_ name: String, pid: Int32? = nil) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid.map(String.init) ?? "self")/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name) {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            if parts.count >= 2, let kb = Double(parts[1]) { return kb / 1024 }
        }
        return nil
    }
}

/// Progress lines on stderr (stdout is reserved for the table or the JSON object).
enum Progress {
    static let start = ContinuousClock.now

    static func say(_ message: String) {
        let t = Measure.seconds(ContinuousClock.now - start)
        FileHandle.standardError.write(Data((String(format: "[%6.1fs] ", t) + message + "\n").utf8))
    }
}

/// `x` with `digits` decimals, "n/a" when not finite.
func fmt(_ x: Double, _ digits: Int) -> String {
    x.isFinite ? String(format: "%.\(digits)f", x) : "n/a"
}
