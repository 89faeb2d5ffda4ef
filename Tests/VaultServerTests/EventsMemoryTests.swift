import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultTestSupport

@testable import VaultServer

#if canImport(Glibc)
import Glibc
#endif

/// The server's memory per idle event stream (Docs/events.md §6): 1,000 streams held open over real
/// sockets, the process's resident memory before and after, beside 1,000 idle keep-alive connections
/// (each after one `GET /health`) measured the same way. The client ends are bare sockets in this
/// process, which add no user-space memory of their own. In a debug build an idle HTTP connection alone
/// costs about 40 KiB; the stream must add little to it.
@Suite("Live events: memory per idle stream")
struct EventsMemoryTests {
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE))) : 0
    }

    /// A socket that sent `GET /v1/events` with `token`; -1 when it could not connect.
    static func openStream(port: Int, path: String, token: String) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return -1
        }
        let request = Array(
            "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n\(CareVaultVersion.clientHeader): \(CareVaultVersion.release)\r\n\r\n"
                .utf8
        )
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        return fd
    }

    /// A measurement: run alone (`CAREVAULT_MEASURE=1 swift test --skip-build --filter EventsMemoryTests`),
    /// since 2,000 connections slow every test beside it and their allocations blur the figure.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["CAREVAULT_MEASURE"] == "1"))
    func anIdleStreamCostsLittleMoreThanItsConnection() async throws {
        try await Self.live(EventHub.Limits(perAccount: 2_000, perInstance: 2_000)) { hub, patient, port in
            func idle(_ n: Int) async throws -> [Int32] {
                let fds = (0..<n).map { _ in Self.openStream(port: port, path: Routes.health, token: patient.token) }
                try await Task.sleep(for: .seconds(3))
                return fds
            }
            func open(_ n: Int) async throws -> [Int32] {
                let target = hub.openStreams + n
                let fds = (0..<n).map { _ in Self.openStream(port: port, path: Routes.events, token: patient.token) }
                let deadline = ContinuousClock.now + .seconds(60)
                while hub.openStreams < target, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
                #expect(hub.openStreams == target)
                return fds
            }
            // Warm up (first connections allocate pools and caches), then measure 1,000 of each.
            var fds = try await open(50) + idle(50)
            func measure(_ body: () async throws -> [Int32]) async throws -> Double {
                try await Task.sleep(for: .milliseconds(500))
                let before = Self.residentBytes()
                fds += try await body()
                try await Task.sleep(for: .milliseconds(500))
                return Double(Self.residentBytes() - before) / 1_024 / 1_000
            }
            let connection = try await measure { try await idle(1_000) }
            let stream = try await measure { try await open(1_000) }
            print("idle connection: \(String(format: "%.1f", connection)) KiB; idle event stream: \(String(format: "%.1f", stream)) KiB")
            #expect(stream - connection <= 8, "an event stream adds at most 8 KiB to its connection")
            for fd in fds { close(fd) }
        }
    }

    /// A server on a real loopback socket with a hub of `limits`, and patient "pat": `body` gets the hub,
    /// the patient and the port.
    static func live(_ limits: EventHub.Limits, _ body: @escaping @Sendable (EventHub, TestUser, Int) async throws -> Void) async throws {
        try await TestDatabase.with(.sqlite) { repo in
            let h = APIHarness(repository: repo)
            let hub = EventHub(limits: limits)
            var app = Application(
                router: buildRouter(repository: repo, adminKey: h.admin.publicKey, clock: h.clock.function, events: hub),
                configuration: .init(address: .hostname("127.0.0.1", port: 0))
            )
            app.addServices(hub)
            try await app.test(.live) { client in
                let patient = try await APIClient(client: client, harness: h).user("pat", role: .patient)
                try await body(hub, patient, try #require(client.port))
            }
        }
    }
}
