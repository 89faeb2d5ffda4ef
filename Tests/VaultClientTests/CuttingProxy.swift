import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on a free loopback port in front of a server, that loses answers the way a phone network, a
/// proxy or a rolling restart does: for each request line `cuts` matches (its first `times` times), the
/// request is passed on whole, the server's answer is awaited (so the server has committed it) and then the
/// connection is closed without a byte of that answer reaching the client. Everything else is relayed as is.
///
/// Blocking sockets on threads of its own: nothing here waits on the test process's cooperative pool.
final class CuttingProxy: @unchecked Sendable {
    /// Which requests to cut: `method path` as on the request line (path with its query).
    struct Rule: Sendable {
        var matches: @Sendable (_ method: String, _ path: String) -> Bool
        var times: Int
    }

    let port: UInt16
    private let upstreamPort: UInt16
    private let listener: Int32
    private let state = NIOLockedValueBox<State>(State())

    private struct State {
        var rules: [Rule] = []
        var cut: [String] = []
        var seen: [String] = []
        var answers: [Int] = []
        var closed = false
        var sockets: Set<Int32> = []
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }
    /// The request lines cut so far, in order.
    var cutRequests: [String] { state.withLockedValue { $0.cut } }
    /// Every request line relayed or cut, in order.
    var requests: [String] { state.withLockedValue { $0.seen } }
    /// The status of every answer relayed to a client (not of those cut), in order.
    var answers: [Int] { state.withLockedValue { $0.answers } }

    init(upstreamPort: UInt16) throws {
        self.upstreamPort = upstreamPort
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw POSIXError(.EIO) }
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 64) == 0 else {
            close(listener)
            throw POSIXError(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// Cuts the answer of the next `times` requests whose line `matches`.
    func cut(times: Int = 1, _ matches: @escaping @Sendable (_ method: String, _ path: String) -> Bool) {
        state.withLockedValue { $0.rules.append(Rule(matches: matches, times: times)) }
    }

    /// Cuts the next request of `method` to exactly `path` (no query).
    func cut(_ method: String, _ path: String, times: Int = 1) {
        cut(times: times) { m, p in m == method && p == path }
    }

    /// Closes the listener and every connection.
    func stop() {
        let sockets = state.withLockedValue { s -> Set<Int32> in
            s.closed = true
            return s.sockets
        }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for s in sockets { shutdown(s, Int32(SHUT_RDWR)) }
    }

    deinit { stop() }

    private func track(_ fd: Int32) { state.withLockedValue { _ = $0.sockets.insert(fd) } }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            if state.withLockedValue({ $0.closed }) {
                close(client)
                return
            }
            Thread.detachNewThread { [self] in relay(client) }
        }
    }

    private func connectUpstream() -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = upstreamPort.bigEndian
        let ok = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard ok == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// One client connection: requests go up on this thread, answers come down on another. When a request
    /// to cut goes up, the down side drops what the server answers and closes both ends.
    private func relay(_ client: Int32) {
        guard let server = connectUpstream() else {
            close(client)
            return
        }
        track(client)
        track(server)
        let cutting = NIOLockedValueBox(false)
        let down = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = read(server, &buffer, buffer.count)
                if n <= 0 { break }
                if cutting.withLockedValue({ $0 }) { break }
                let statuses = Self.statusLines(Array(buffer[0..<n]))
                state.withLockedValue { $0.answers += statuses }
                if !writeAll(client, buffer, n) { break }
            }
            shutdown(client, Int32(SHUT_RDWR))
            shutdown(server, Int32(SHUT_RDWR))
        }
        down.start()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = read(client, &buffer, buffer.count)
            if n <= 0 { break }
            // AsyncHTTPClient writes a request's head in one piece; HTTP/1.1 without pipelining, so the next
            // answer from the server is this request's.
            for line in Self.requestLines(Array(buffer[0..<n])) where shouldCut(line) {
                cutting.withLockedValue { $0 = true }
            }
            if !writeAll(server, buffer, n) { break }
        }
        shutdown(server, Int32(SHUT_RDWR))
        shutdown(client, Int32(SHUT_RDWR))
        while !down.isFinished { usleep(1_000) }  // blocking: own thread
        close(client)
        close(server)
        state.withLockedValue {
            $0.sockets.remove(client)
            $0.sockets.remove(server)
        }
    }

    private func shouldCut(_ line: (method: String, path: String)) -> Bool {
        state.withLockedValue { s in
            s.seen.append("\(line.method) \(line.path)")
            guard let index = s.rules.firstIndex(where: { $0.times > 0 && $0.matches(line.method, line.path) }) else { return false }
            s.rules[index].times -= 1
            s.cut.append("\(line.method) \(line.path)")
            return true
        }
    }

    /// The request lines (`METHOD path HTTP/1.1`) in `bytes`.
    static func requestLines(_ bytes: [UInt8]) -> [(method: String, path: String)] {
        let text = String(decoding: bytes, as: UTF8.self)
        return text.components(separatedBy: "\r\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count == 3, parts[2] == "HTTP/1.1", ["GET", "POST", "PUT", "DELETE", "PATCH"].contains(String(parts[0])) else {
                return nil
            }
            return (String(parts[0]), String(parts[1]))
        }
    }

    /// The statuses of the answer heads (`HTTP/1.1 201 Created`) in `bytes`.
    static func statusLines(_ bytes: [UInt8]) -> [Int] {
        String(decoding: bytes, as: UTF8.self).components(separatedBy: "\r\n").compactMap { line in
            guard line.hasPrefix("HTTP/1.1 "), line.count >= 12 else { return nil }
            return Int(line.dropFirst(9).prefix(3))
        }
    }

    private func writeAll(_ fd: Int32, _ buffer: [UInt8], _ count: Int) -> Bool {
        var offset = 0
        while offset < count {
            let n = buffer.withUnsafeBytes { send(fd, $0.baseAddress! + offset, count - offset, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }
}
