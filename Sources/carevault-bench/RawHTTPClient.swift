import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import VaultAPI

/// Plain HTTP to the in-process server for the measurements that must not include the SDK's own
/// client work (the load generator, the server-only probes): pre-encoded bodies out, raw bytes back.
/// It is AsyncHTTPClient, the library the SDK's Transport uses, with its own pool of up to
/// `connections` keep-alive connections (the SDK's process-wide pool stops at 8 per host).
final class RawHTTPClient: Sendable {
    let http: HTTPClient
    let baseURL: String

    init(baseURL: String, connections: Int) {
        var config = HTTPClient.Configuration()
        config.timeout = .init(connect: .seconds(5), read: .seconds(60))
        config.redirectConfiguration = .disallow
        config.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(1, connections))
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
        self.baseURL = baseURL
    }

    func shutdown() async { try? await http.shutdown() }

    /// Sends one request and returns the status and the whole body (at most 64 MiB).
    /// The records route speaks its binary bodies (Docs/envelope-v1.md §7.2, §7.3), as the SDK does.
    func send(_ method: HTTPMethod, _ path: String, token: String?, body: ByteBuffer? = nil) async throws -> (status: UInt, body: ByteBuffer) {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        let records = path.hasPrefix(Routes.records)
        request.headers.add(name: "Accept", value: records && method == .GET ? RecordMediaType.page : RecordMediaType.json)
        request.headers.add(name: CareVaultVersion.clientHeader, value: CareVaultVersion.release)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let body {
            request.headers.add(name: "Content-Type", value: records ? RecordMediaType.batch : RecordMediaType.json)
            request.body = .bytes(body)
        }
        let response = try await http.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return (response.status.code, bytes)
    }
}

/// Runs `body` with a raw client and always shuts it down.
func withRawHTTP<T: Sendable>(_ baseURL: String, connections: Int, _ body: (RawHTTPClient) async throws -> T) async throws -> T {
    try await using(RawHTTPClient(baseURL: baseURL, connections: connections), release: { await $0.shutdown() }, body)
}
