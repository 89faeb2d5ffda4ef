import Foundation
import Testing
import VaultAPI

#if canImport(Glibc)
import Glibc
#endif

/// carevault-server against clients that hold connections or send too much (Docs/operations.md
/// §"Timeouts and connections"): slow or half-sent requests are cut off, /health keeps answering, and a
/// client that writes a whole oversized body before reading gets its answer instead of hanging.
@Suite("End to end: the server under slow and oversized clients", .serialized)
struct ServerAvailabilityTests {
    /// A running server with `flags`, under a descriptor limit of `descriptors`; stopped when the test ends.
    final class Server: @unchecked Sendable {
        let process: ChildProcess
        let port: UInt16
        let tools: Tools

        init(flags: [String], descriptors: Int = 1024) async throws {
            tools = try Tools()
            let keys = tools.root.appendingPathComponent("admin")
            _ = try await tools.run("carevault-admin", ["keygen", "--out", keys.path])
            let server = Tools.bin.appendingPathComponent("carevault-server").path
            let p = ChildProcess()
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments =
                ["-c", "ulimit -n \(descriptors) && exec \"$0\" \"$@\"", server, "--admin-key", keys.appendingPathComponent("admin.pub").path]
                + ["--port", "0", "--log-level", "critical", "--database", "sqlite:" + tools.root.appendingPathComponent("server.sqlite").path]
                + flags
            p.environment = tools.env
            let out = tools.root.appendingPathComponent("server.out")
            p.standardOutput = try ChildStdio.output(to: out)
            p.standardError = .null
            try p.run()
            process = p
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                if let text = try? String(contentsOf: out, encoding: .utf8),
                    let r = text.range(of: "(?<=://127.0.0.1:)[0-9]+", options: .regularExpression), let port = UInt16(text[r])
                {
                    self.port = port
                    return
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            p.signalIfRunning(SIGKILL)
            throw Tools.ToolMissing(path: "carevault-server did not start within 30 s")
        }

        deinit {
            process.stopIfRunning()
            try? FileManager.default.removeItem(at: tools.root)
        }

        /// GET /health on a new connection: the status line, or nil when nothing came back in `seconds`.
        func health(within seconds: Int) -> String? {
            guard let s = try? RawSocket(port: port, timeout: seconds), s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n") else { return nil }
            let answer = s.readAll().text
            return answer.isEmpty ? nil : String(answer.prefix { $0 != "\r" })
        }
    }

    /// The header line naming the client's release, which every `/v1` request carries (Docs/design.md §8).
    static let client = "\(CareVaultVersion.clientHeader): \(CareVaultVersion.release)\r\n"

    /// The status line a client gets that writes a whole body of `bytes` before reading the answer, as
    /// Python's urllib does (with `Connection: close`), and whether the whole body could be written.
    static func bodyFirst(_ server: Server, _ path: String, bytes: Int) async throws -> (String, Bool) {
        try await Tools.offPool {
            let s = try RawSocket(port: server.port, timeout: 30)
            let head =
                "POST \(path) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\(Self.client)Content-Type: application/json\r\nContent-Length: \(bytes)\r\n\r\n"
            // A write the server stops reading fails after the socket's timeout instead of hanging.
            let wrote = s.write(head) && s.write([UInt8](repeating: 0x20, count: bytes))
            let answer = s.readAll()
            return (String(answer.text.prefix { $0 != "\r" }), wrote)
        }
    }

    @Test func aClientThatWritesAWholeOversizedBodyFirstGetsItsAnswer() async throws {
        let server = try await Server(flags: [])
        for (path, status) in [
            ("/v1/auth/login", "413"), ("/v1/no-such-route", "404"), ("/v1/admin/registrations/\(UUID().uuidString)/reject", "401"),
        ] {
            let started = Date()
            let (line, wrote) = try await Self.bodyFirst(server, path, bytes: 20 * 1024 * 1024)
            #expect(wrote && line.hasPrefix("HTTP/1.1 \(status)"), "\(path): '\(line)', body written: \(wrote)")
            #expect(Date().timeIntervalSince(started) < 25, "\(path) took \(Date().timeIntervalSince(started)) s")
        }
        // Past what is drained (32 MiB) the connection is closed: the writer learns at once, it does not hang.
        let started = Date()
        let (_, wrote) = try await Self.bodyFirst(server, "/v1/auth/login", bytes: 48 * 1024 * 1024)
        #expect(
            !wrote && Date().timeIntervalSince(started) < 25,
            "a 48 MiB body was \(wrote ? "read whole" : "cut off") after \(Date().timeIntervalSince(started)) s"
        )
        #expect(server.health(within: 5)?.hasPrefix("HTTP/1.1 200") == true)
    }

    /// How long the server kept a connection fed by `feed` (every half second) before closing it, on a
    /// thread of its own; nil when it was still open after `limit` seconds. The expectations stay on the
    /// test's task, where a failure is the test's.
    static func held(_ socket: RawSocket, limit: Double, feed: (@Sendable (RawSocket) -> Void)?) async throws -> Double? {
        try await Tools.offPool {
            let started = Date()
            while Date().timeIntervalSince(started) < limit {
                feed?(socket)
                if socket.closedByPeer(within: 0.5) { return Date().timeIntervalSince(started) }
            }
            return nil
        }
    }

    @Test func slowHeadersAndSlowBodiesAreCutOff() async throws {
        let server = try await Server(flags: ["--header-timeout", "2", "--body-timeout", "3", "--idle-timeout", "30"])
        // Headers a byte at a time, faster than any idle timeout would notice. Bounds wide enough for a loaded
        // machine (the timer starts at the server's accept), and not before the timeout: the close is the
        // deadline's, not an error's.
        let headers = try RawSocket(port: server.port)
        #expect(headers.write("GET /health HTTP/1.1\r\nHost: x\r\n"))
        let heldHeaders = try await Self.held(headers, limit: 20) { _ = $0.write("X-Slow: 1\r\n") }
        #expect(heldHeaders.map { $0 >= 1.5 && $0 < 10 } == true, "slow headers held \(heldHeaders.map { "\($0) s" } ?? "on")")
        // A body a byte at a time.
        let body = try RawSocket(port: server.port)
        #expect(body.write("POST /v1/auth/login HTTP/1.1\r\nHost: x\r\n\(Self.client)Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"))
        let heldBody = try await Self.held(body, limit: 20) { _ = $0.write(" ") }
        #expect(heldBody.map { $0 >= 2.5 && $0 < 11 } == true, "a slow body held \(heldBody.map { "\($0) s" } ?? "on")")
    }

    @Test(.enabled(if: TestPKI.openssl != nil, "needs openssl (Scripts/setup installs it)"))
    func aTLSConnectionThatNeverHandshakesIsClosed() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-pki-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let pki = try await TestPKI(in: dir)
        let server = try await Server(flags: ["--tls-cert", pki.serverCert.path, "--tls-key", pki.serverKey.path, "--header-timeout", "2"])
        // Connected, and not a byte of TLS: the request deadlines start only after a handshake.
        let silent = try RawSocket(port: server.port)
        let held = try await Self.held(silent, limit: 15, feed: nil)
        #expect(held.map { $0 >= 1 && $0 < 12 } == true, "a silent TLS connection held \(held.map { "\($0) s" } ?? "on")")
    }

    @Test func manyHalfSentRequestsDoNotStopHealthFromAnswering() async throws {
        // 128 descriptors, as a small container would give: more half-sent requests than that are held open.
        let server = try await Server(flags: ["--header-timeout", "2", "--max-connections", "64"], descriptors: 128)
        let held = try await Tools.offPool {
            try (0..<200).map { _ in
                let s = try RawSocket(port: server.port)
                _ = s.write("GET /health HTTP/1.1\r\nHost: x\r\n")
                return s
            }
        }
        let started = Date()
        let line = try await Tools.offPool { server.health(within: 20) }
        #expect(line?.hasPrefix("HTTP/1.1 200") == true, "health: \(line ?? "no answer") after \(Date().timeIntervalSince(started)) s")
        withExtendedLifetime(held) {}
    }
}
