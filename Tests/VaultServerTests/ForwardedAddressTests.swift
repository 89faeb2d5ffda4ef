import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

/// `--trusted-proxy` (Docs/operations.md §3): X-Forwarded-For names the client only when a trusted proxy
/// sent it, read from the right; a client cannot choose the address its rate limits count under.
@Suite("Reverse proxy: the client address from X-Forwarded-For")
struct ForwardedAddressTests {
    static let proxies = try! [IPNetwork("10.0.0.0/8"), IPNetwork("2001:db8::/32")]

    static func client(_ peer: String, _ header: [String]) -> String {
        ForwardedAddressMiddleware.clientAddress(peer: peer, forwardedFor: header, trusted: proxies)
    }

    @Test func anUntrustedPeerCannotNameAnotherAddress() {
        #expect(Self.client("192.0.2.7", ["203.0.113.1"]) == "192.0.2.7")
        #expect(Self.client("192.0.2.7", ["10.0.0.1"]) == "192.0.2.7", "not even a proxy's address")
        #expect(Self.client("unknown", ["203.0.113.1"]) == "unknown")
    }

    @Test func theRightmostUntrustedAddressIsTheClient() {
        #expect(Self.client("10.1.2.3", ["203.0.113.1"]) == "203.0.113.1")
        // The client forged the left part; the proxies appended the rest.
        #expect(Self.client("10.1.2.3", ["198.51.100.66, 203.0.113.1, 10.9.9.9"]) == "203.0.113.1")
        #expect(Self.client("10.1.2.3", ["198.51.100.66", "203.0.113.1", "10.9.9.9"]) == "203.0.113.1", "several header lines")
        #expect(Self.client("2001:db8::1", ["2001:0:0:0:0:0:0:abcd"]) == "2001::abcd", "canonical form, one key per address")
        #expect(Self.client("::ffff:10.0.0.1", ["::ffff:203.0.113.1"]) == "203.0.113.1", "IPv4-mapped addresses are IPv4")
        #expect(Self.client("10.1.2.3", ["203.0.113.1:4711"]) == "203.0.113.1", "a port is dropped")
        #expect(Self.client("10.1.2.3", ["[2001:db9::1]:443"]) == "2001:db9::1")
    }

    @Test func garbageOrOnlyProxiesStopAtTheLastTrustedHop() {
        #expect(Self.client("10.1.2.3", ["not-an-address, 10.0.0.9"]) == "10.0.0.9")
        #expect(Self.client("10.1.2.3", ["203.0.113.1, <script>"]) == "10.1.2.3", "garbage right of the client hides it")
        #expect(Self.client("10.1.2.3", []) == "10.1.2.3")
        #expect(Self.client("10.1.2.3", ["10.0.0.8, 10.0.0.9"]) == "10.0.0.8")
        #expect(Self.client("10.1.2.3", [String(repeating: "10.0.0.1, ", count: 100) + "10.0.0.2"]) == "10.0.0.1")
    }

    @Test func addressBlocksParseAndMatch() throws {
        let v4 = try IPNetwork("192.168.16.0/20")
        #expect(v4.contains(try #require(IPAddress("192.168.31.255"))))
        #expect(!v4.contains(try #require(IPAddress("192.168.32.0"))))
        #expect(!v4.contains(try #require(IPAddress("::ffff:c0a8:2000"))))
        #expect(try IPNetwork("::ffff:10.0.0.0/104") == IPNetwork("10.0.0.0/8"))
        #expect(try IPNetwork("203.0.113.5").prefixLength == 32)
        #expect(try IPNetwork("0.0.0.0/0").contains(try #require(IPAddress("8.8.8.8"))))
        #expect(try !IPNetwork("::/0").contains(try #require(IPAddress("8.8.8.8"))), "families never mix")
        for bad in ["", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/", "vault.example/8", "10.0.0/8", "::/129", "10.0.0.0/８"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try IPNetwork(bad) }
        }
    }

    /// Wrong logins, the address's free ones and two more, sent with `forwarded` as X-Forwarded-For; the
    /// routers run on a clock that stands still, so a slow run cannot outlast the back-off.
    static func guess(_ client: some TestClientProtocol, forwarded: @Sendable (Int) -> String) async throws -> [HTTPResponse.Status] {
        var statuses: [HTTPResponse.Status] = []
        for i in 0...LoginRateLimiter.Limits().freeAddressFailures + 1 {
            let body = try JSONEncoder().encode(LoginRequest(username: "ghost\(i)", loginKey: Base64URL.encode(RandomBytes.bytes(count: 32))))
            let headers: HTTPFields = [
                .contentType: "application/json", .careVaultClient: CareVaultVersion.release, ForwardedAddressMiddleware.header: forwarded(i),
            ]
            statuses.append(try await client.execute(uri: Routes.login, method: .post, headers: headers, body: ByteBuffer(bytes: body)).status)
        }
        return statuses
    }

    /// The address the newest audit entry records.
    static func lastAuditAddress(_ repo: any VaultRepository) async throws -> String? {
        try await repo.auditEntries(after: 0, limit: 1_000, patientID: nil).last?.details["address"]
    }

    @Test func aTrustedProxysClientsAreLimitedAndAuditedByTheirOwnAddress() async throws {
        try await TestDatabase.with(.sqlite) { repo in
            let router = buildRouter(
                repository: repo,
                adminKey: SigningKeyPair.generate().publicKey,
                clock: TestClock().function,
                trustedProxies: [try IPNetwork("127.0.0.0/8")]
            )
            try await Application(router: router).test(.live) { client in
                let statuses = try await Self.guess(client) { _ in "198.51.100.1, 203.0.113.9" }
                #expect(statuses.dropLast().allSatisfy { $0 == .unauthorized } && statuses.last == .tooManyRequests)
                #expect(try await Self.lastAuditAddress(repo) == "203.0.113.9")
                // Another client behind the same proxy has its own count.
                #expect(try await Self.guess(client) { _ in "203.0.113.10" }.first == .unauthorized)
                #expect(try await Self.lastAuditAddress(repo) == "203.0.113.10")
            }
        }
    }

    @Test func aClientSendingItsOwnHeaderIsIgnored() async throws {
        try await TestDatabase.with(.sqlite) { repo in
            let router = buildRouter(
                repository: repo,
                adminKey: SigningKeyPair.generate().publicKey,
                clock: TestClock().function,
                trustedProxies: Self.proxies
            )
            try await Application(router: router).test(.live) { client in
                // A new forged address on every guess does not reset the count: the peer's address is counted.
                let statuses = try await Self.guess(client) { i in "203.0.113.\(i)" }
                #expect(statuses.dropLast().allSatisfy { $0 == .unauthorized } && statuses.last == .tooManyRequests)
                #expect(try await Self.lastAuditAddress(repo) == "127.0.0.1")
            }
        }
    }
}
