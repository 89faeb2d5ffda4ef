import Foundation
import Testing
import VaultAPI
import VaultClient

/// The compatibility policy from the client's side (Docs/design.md §8): every request names the release,
/// and a server that serves only newer clients is reported as "upgrade required", never as an answer
/// this tool cannot read.
@Suite("Transport: the client's release and a server that needs a newer one", .serialized, OnOwnThread())
struct ClientVersionTests {
    /// A server that answers 426, as a newer CareVault server does, but only to a request that named
    /// this release in `CareVault-Client`; any other request gets 400, so the test sees the header was sent.
    static func upgradeServer() throws -> FakeServer {
        try FakeServer { server, fd in
            var head: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            // The head ends at the first blank line; a body may come in the same read.
            while !String(decoding: head, as: UTF8.self).contains("\r\n\r\n") {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { return }
                head += buffer[0..<n]
            }
            let named = String(decoding: head, as: UTF8.self).lowercased()
                .contains("\r\n\(CareVaultVersion.clientHeader.lowercased()): \(CareVaultVersion.release)\r\n")
            let (status, body) =
                named
                ? ("426 Upgrade Required", #"{"error":{"code":"upgrade_required","message":"this server serves clients from 9.0.0 on: upgrade"}}"#)
                : ("400 Bad Request", #"{"error":{"code":"bad_request","message":"no client header"}}"#)
            server.write(
                fd,
                "HTTP/1.1 \(status)\r\nContent-Type: application/json\r\nUpgrade: CareVault/9.0.0\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            )
        }
    }

    @Test func everyRequestNamesTheReleaseAndA426SaysToUpgrade() async throws {
        let server = try Self.upgradeServer()
        defer { server.stop() }
        let transport = try Transport(baseURL: "http://127.0.0.1:\(server.port)", maxAttempts: 3, baseDelayMs: 10, timeout: .seconds(10))
        let get = await #expect(throws: ClientError.self) { _ = try await transport.send(Endpoint<NoBody, NoAnswer>(.GET, Routes.me)) }
        let post = await #expect(throws: ClientError.self) {
            _ = try await transport.send(Endpoint<[String: String], NoAnswer>(.POST, Routes.login), ["username": "x"])
        }
        for error in [get, post] {
            #expect(error == .upgradeRequired("this server serves clients from 9.0.0 on: upgrade"))
            #expect(error.map { "\($0)" } == "upgrade required: this server serves clients from 9.0.0 on: upgrade")
        }
    }

    @Test func releaseNumbersCompareNumberByNumber() {
        typealias R = CareVaultVersion.Release
        #expect(R("0.10.0")! > R("0.9.12")!)
        #expect(R("1.0.0-beta.1") == R(major: 1, minor: 0, patch: 0))
        #expect(R("0.10.0+build.7") == R(major: 0, minor: 10, patch: 0))
        for bad in ["", "0.10", "0.10.0.1", "v0.10.0", "0.-1.0", " 0.1.0", "0.1.x", "0..0", "1234567.0.0", "٣.0.0"] {
            #expect(R(bad) == nil, "\(bad)")
        }
        #expect(R(CareVaultVersion.release)! >= CareVaultVersion.minimumClient, "this release serves itself")
    }
}
