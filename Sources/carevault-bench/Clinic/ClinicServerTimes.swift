import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Where the workload's time went, from outside the clients: each instance's own request durations by
/// route (its `/metrics` histogram, read at the start and end of the workload, and just before instance 0
/// is killed, whose counters start again from zero), and the CPU seconds each process used meanwhile.
/// A client's latency well above its requests' server time was spent before or after the server: in
/// the client's own work, or waiting for a core.
final class ClinicServerTimes: Sendable {
    /// Cumulative request counts by "METHOD route" and bucket bound (seconds).
    typealias Histograms = [String: [Double: Double]]

    private struct State {
        var start: [Histograms] = []
        var beforeKill: Histograms?
        var cpuStart: [String: Double] = [:]
        var cpuBeforeKill: Double?
        var postgresBeforeRestart: Double?
    }

    private let state = NIOLockedValueBox(State())
    private let instances: ClinicInstances
    /// Routes that served fewer requests than this are left out of the report.
    private let minimumCount: Double

    init(instances: ClinicInstances, minimumCount: Int = 20) {
        self.instances = instances
        self.minimumCount = Double(minimumCount)
    }

    func begin() async {
        let start = await scrapeAll()
        let cpu = cpuNow()
        state.withLockedValue {
            $0.start = start
            $0.cpuStart = cpu
        }
    }

    /// Called just before instance 0 is killed.
    func beforeKill() async {
        let h = await Self.scrape(instances.urls[0])
        let cpu = instances.cpuSeconds(0)
        state.withLockedValue {
            $0.beforeKill = h
            $0.cpuBeforeKill = cpu
        }
    }

    /// Called just before PostgreSQL restarts, whose processes' CPU counts end with them.
    func beforeRestart() {
        let cpu = ProcessCPU.seconds(command: "postgres")
        state.withLockedValue { $0.postgresBeforeRestart = cpu }
    }

    /// The lines of the report: per route, the requests served during the workload and their server-side
    /// quantiles (as the histogram's bucket bounds); then CPU seconds by process.
    func finish(seconds: Double) async -> [String] {
        let end = await scrapeAll()
        let cpuEnd = cpuNow()
        let s = state.withLockedValue { $0 }
        var total: Histograms = [:]
        for (i, h) in end.enumerated() {
            let start = i < s.start.count ? s.start[i] : [:]
            var delta = Self.subtract(h, start)
            if i == 0, let before = s.beforeKill {
                // Restarted: what it served before the kill, plus everything since it came back.
                delta = Self.add(Self.subtract(before, start), h)
            }
            total = Self.add(total, delta)
        }
        var lines: [String] = []
        for (route, buckets) in total.sorted(by: { ($0.value[.infinity] ?? 0) > ($1.value[.infinity] ?? 0) }) {
            let count = buckets[.infinity] ?? 0
            guard count >= minimumCount else { continue }
            let over100 = count - (buckets[0.1] ?? 0)
            let over250 = count - (buckets[0.25] ?? 0)
            lines.append(
                "\(route): \(Int(count)) served; p50 <= \(Self.bound(buckets, 0.5)) s, p99 <= \(Self.bound(buckets, 0.99)) s; "
                    + "over 100 ms: \(Int(over100)), over 250 ms: \(Int(over250))"
            )
        }
        var cpu: [String] = []
        for (name, end) in cpuEnd.sorted(by: { $0.key < $1.key }) {
            var used = end - (s.cpuStart[name] ?? 0)
            if name == "instance 0", let before = s.cpuBeforeKill { used = (before - (s.cpuStart[name] ?? 0)) + end }
            if name == Self.postgres, let before = s.postgresBeforeRestart { used = (before - (s.cpuStart[name] ?? 0)) + end }
            cpu.append("\(name) \(fmt(used, 1)) s (\(fmt(100 * used / seconds, 0)) % of one core)")
        }
        lines.append("CPU during the workload: " + cpu.joined(separator: ", ") + " (2 cores = \(fmt(2 * seconds, 0)) s)")
        return lines
    }

    static let postgres = "postgres (all processes)"

    private func scrapeAll() async -> [Histograms] {
        var out: [Histograms] = []
        for url in instances.urls { out.append(await Self.scrape(url)) }
        return out
    }

    private func cpuNow() -> [String: Double] {
        var cpu: [String: Double] = ["bench (all clients)": ProcessCPU.seconds(pid: getpid()) ?? 0]
        for i in 0..<instances.count { cpu["instance \(i)"] = instances.cpuSeconds(i) ?? 0 }
        cpu[Self.postgres] = ProcessCPU.seconds(command: "postgres")
        return cpu
    }

    /// The histogram `carevault_http_request_duration_seconds` of one instance; empty when unreadable.
    static func scrape(_ baseURL: String) async -> Histograms {
        do {
            let request = HTTPClientRequest(url: baseURL + "/metrics")
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 16 << 20)
            return parse(String(buffer: body))
        } catch {
            return [:]
        }
    }

    static func parse(_ text: String) -> Histograms {
        var out: Histograms = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("carevault_http_request_duration_seconds_bucket{") {
            guard let close = line.lastIndex(of: "}"), let value = Double(line[line.index(after: close)...].trimmingCharacters(in: .whitespaces))
            else {
                continue
            }
            let labels = label(line[..<close])
            guard let route = labels["route"], let method = labels["method"], let le = labels["le"] else { continue }
            let bound = le == "+Inf" ? Double.infinity : Double(le) ?? .nan
            guard !bound.isNaN else { continue }
            out["\(method) \(route)", default: [:]][bound, default: 0] += value
        }
        return out
    }

    private static func label(_ text: Substring) -> [String: String] {
        var out: [String: String] = [:]
        let inner = text.drop { $0 != "{" }.dropFirst()
        for pair in inner.split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { continue }
            out[String(parts[0])] = String(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
        }
        return out
    }

    static func subtract(_ a: Histograms, _ b: Histograms) -> Histograms {
        a.reduce(into: [:]) { out, e in
            out[e.key] = e.value.reduce(into: [:]) { $0[$1.key] = max(0, $1.value - (b[e.key]?[$1.key] ?? 0)) }
        }
    }

    static func add(_ a: Histograms, _ b: Histograms) -> Histograms {
        var out = a
        for (route, buckets) in b { for (le, v) in buckets { out[route, default: [:]][le, default: 0] += v } }
        return out
    }

    /// The smallest bucket bound holding at least `q` of the requests.
    static func bound(_ buckets: [Double: Double], _ q: Double) -> String {
        let total = buckets[.infinity] ?? 0
        for le in buckets.keys.sorted() where (buckets[le] ?? 0) >= q * total {
            return le.isInfinite ? "+Inf" : fmt(le, 3)
        }
        return "+Inf"
    }
}

/// CPU seconds (user + system) of processes, from /proc.
enum ProcessCPU {
    static let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// `children`: with the ended children it waited for (PostgreSQL's ended backends count in the
    /// postmaster's), which a process that starts servers of its own must leave out.
    static func seconds(pid: Int32, children: Bool = false) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else {
            return nil
        }
        // Fields after "(comm)": state is field 3, utime 14 and stime 15 (1-based).
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 15, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let waited = children ? (Double(fields[13]) ?? 0) + (Double(fields[14]) ?? 0) : 0
        return (user + system + waited) / ticks
    }

    /// The CPU seconds of every live process whose command name is `command`.
    static func seconds(command: String) -> Double {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.compactMap { Int32($0) } ?? []
        var total = 0.0
        for pid in pids {
            guard let comm = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8),
                comm.trimmingCharacters(in: .whitespacesAndNewlines) == command
            else { continue }
            total += seconds(pid: pid, children: true) ?? 0
        }
        return total
    }
}
