import Foundation
import Testing
import VaultAPI

@testable import VaultClient

/// The client's side of the record wire (Docs/envelope-v1.md §7.3, Docs/design.md §8): a pull accepts only
/// the binary page, and an answer in another form (the JSON page of servers before the binary wire, or a
/// proxy's page) is an answer this tool cannot read, never parsed as one.
@Suite("Transport: a pull reads only binary pages", .serialized, OnOwnThread())
struct RecordWireClientTests {
    @Test func aJSONPageIsRefusedAndThePullAsksOnlyForTheBinaryOne() async throws {
        let accepts = Accepts()
        let server = try FakeServer { server, fd in
            var head: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !String(decoding: head, as: UTF8.self).contains("\r\n\r\n") {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { return }
                head += buffer[0..<n]
            }
            let line = String(decoding: head, as: UTF8.self).split(separator: "\r\n").first { $0.lowercased().hasPrefix("accept:") }
            accepts.append(line.map(String.init) ?? "")
            let body = #"{"changes":[],"done":true,"nextCursor":0}"#
            server.write(
                fd,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            )
        }
        defer { server.stop() }
        let transport = try Transport(baseURL: "http://127.0.0.1:\(server.port)", maxAttempts: 1, timeout: .seconds(10))
        let error = await #expect(throws: ClientError.self) {
            _ = try await transport.pullPage(query: "?since=0", after: 0, auth: .session("token"))
        }
        #expect(error?.isUnreadableAnswer == true)
        #expect("\(error!)".contains("expected a page of changes from GET /v1/records; got 'application/json'"), "\(error!)")
        #expect(accepts.all == ["Accept: \(RecordMediaType.page)"])
    }

    final class Accepts: @unchecked Sendable {
        private let lock = NSLock()
        private var lines: [String] = []
        func append(_ line: String) { lock.withLock { lines.append(line) } }
        var all: [String] { lock.withLock { lines } }
    }
}
