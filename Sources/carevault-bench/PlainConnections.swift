import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Idle keep-alive connections to the server, each after one `GET /v1/health` answered: the floor of the
/// memory per idle event stream (what any open connection costs the server, with no stream on it). Plain
/// blocking sockets, so that nothing on the client side changes what the server holds.
final class PlainConnections: Sendable {
    private let fds: [Int32]

    private init(fds: [Int32]) { self.fds = fds }

    static func open(_ n: Int, baseURL: String) throws -> PlainConnections {
        guard let url = URL(string: baseURL), let port = url.port else { throw BenchError("no port in \(baseURL)") }
        let request = Array("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: keep-alive\r\n\r\n".utf8)
        var fds: [Int32] = []
        do {
            for _ in 0..<n {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                guard fd >= 0 else { throw BenchError("socket: errno \(errno)") }
                fds.append(fd)
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_port = in_port_t(UInt16(port).bigEndian)
                address.sin_addr.s_addr = inet_addr("127.0.0.1")
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard connected == 0 else { throw BenchError("connect: errno \(errno)") }
                guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else {
                    throw BenchError("send: errno \(errno)")
                }
                try readAnswer(fd)
            }
        } catch {
            for fd in fds { Glibc.close(fd) }
            throw error
        }
        return PlainConnections(fds: fds)
    }

    /// Reads one answer: its head, then as many body bytes as Content-Length says.
    private static func readAnswer(_ fd: Int32) throws {
        var got: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { throw BenchError("the server closed a plain connection") }
            got += buffer[0..<n]
            let text = String(decoding: got, as: UTF8.self)
            guard let end = text.range(of: "\r\n\r\n") else { continue }
            let head = text[..<end.lowerBound].lowercased()
            let length =
                head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            if text.utf8.distance(from: text.utf8.startIndex, to: end.upperBound) + length <= got.count { return }
        }
    }

    func close() { for fd in fds { Glibc.close(fd) } }
}
