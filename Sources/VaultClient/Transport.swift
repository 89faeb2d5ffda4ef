import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import VaultAPI
import VaultCore
import VaultCrypto

/// HTTP/JSON transport to a CareVault server. One place maps statuses and error codes to `ClientError`,
/// and only temporary failures are retried (exponential backoff with full jitter).
public final class Transport: Sendable {
    /// The server's base URL.
    public let baseURL: String
    /// The process-wide client: its connection pool lives as long as the process, so no transport can
    /// forget to shut one down. A refused connection fails at once (the retry policy here decides what
    /// to retry), instead of the pool retrying until the request deadline.
    var http: HTTPClient { Self.client }
    static let client: HTTPClient = {
        var config = HTTPClient.Configuration()
        config.timeout = .init(connect: .seconds(5), read: .seconds(60))
        config.redirectConfiguration = .disallow
        config.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
    }()
    let maxAttempts: Int
    let baseDelayMs: UInt64
    static let decoder = JSONDecoder()
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// A transport to `baseURL` (e.g. `http://127.0.0.1:8080`).
    public init(baseURL: String, maxAttempts: Int = 4, baseDelayMs: UInt64 = 200) throws {
        guard let url = URL(string: baseURL), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
            throw ClientError.invalidRequest("server URL must look like http://host:port, got '\(baseURL)'")
        }
        // The login key and session tokens must not cross a network in clear: plain http is for loopback only.
        let loopback = ["127.0.0.1", "localhost", "::1", "[::1]"].contains(url.host ?? "")
        if scheme == "http", !loopback, ProcessInfo.processInfo.environment["CAREVAULT_ALLOW_INSECURE_HTTP"] != "1" {
            throw ClientError.invalidRequest(
                "refusing plain http to \(url.host ?? "?"): use https (or set CAREVAULT_ALLOW_INSECURE_HTTP=1 on a trusted network)"
            )
        }
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelayMs = baseDelayMs
    }

    /// Kept for callers that want to mark the end of use; the shared pool needs no shutdown.
    public func shutdown() async {}

    /// Authentication for one request.
    public enum Auth: Sendable {
        case none
        case session(String)
        case admin(SigningKeyPair)
    }

    /// Sends a request and decodes the JSON answer.
    public func send<Response: Decodable>(
        _ method: HTTPMethod,
        _ path: String,
        body: (any Encodable & Sendable)? = nil,
        auth: Auth = .none,
        as: Response.Type = Response.self
    ) async throws -> Response {
        let bytes = try await sendRaw(method, path, body: body, auth: auth)
        do {
            return try Self.decoder.decode(Response.self, from: Data(bytes))
        } catch {
            throw ClientError.server(code: nil, "unexpected answer from \(path): \(error)")
        }
    }

    /// Sends a request whose answer has no body worth decoding.
    public func sendIgnoringBody(_ method: HTTPMethod, _ path: String, body: (any Encodable & Sendable)? = nil, auth: Auth = .none) async throws {
        _ = try await sendRaw(method, path, body: body, auth: auth)
    }

    /// Sends a body that is already JSON (e.g. envelopes as they are stored) and decodes the answer.
    public func send<Response: Decodable>(
        _ method: HTTPMethod,
        _ path: String,
        json payload: [UInt8],
        auth: Auth = .none,
        as: Response.Type = Response.self
    ) async throws -> Response {
        let bytes = try await sendRaw(method, path, payload: payload, auth: auth)
        do {
            return try Self.decoder.decode(Response.self, from: Data(bytes))
        } catch {
            throw ClientError.server(code: nil, "unexpected answer from \(path): \(error)")
        }
    }

    func sendRaw(_ method: HTTPMethod, _ path: String, body: (any Encodable & Sendable)?, auth: Auth) async throws -> [UInt8] {
        try await sendRaw(method, path, payload: try body.map { Array(try Self.encoder.encode($0)) } ?? [], auth: auth)
    }

    func sendRaw(_ method: HTTPMethod, _ path: String, payload: [UInt8], auth: Auth) async throws -> [UInt8] {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await once(method, path, payload: payload, auth: auth)
            } catch let error as ClientError {
                guard case .temporary = error, attempt < maxAttempts else { throw error }
            }
            // Full jitter: a random delay up to base * 2^attempt, so retrying clients spread out.
            let cap = baseDelayMs << UInt64(attempt)
            try await Task.sleep(for: .milliseconds(UInt64(RandomBytes.uniform(UInt32(min(cap, 10_000))))))
        }
    }

    private func once(_ method: HTTPMethod, _ path: String, payload: [UInt8], auth: Auth) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        request.headers.add(name: "Accept", value: "application/json")
        if !payload.isEmpty || method == .POST || method == .PUT {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: payload))
        }
        switch auth {
        case .none: break
        case let .session(token): request.headers.add(name: "Authorization", value: "Bearer \(token)")
        case let .admin(key):
            // Each attempt is signed anew: the server accepts a signature once.
            let h = AdminRequestSignature.sign(
                method: method.rawValue,
                pathAndQuery: path,
                body: payload,
                timestamp: Date().unixMillis,
                adminKey: key
            )
            request.headers.add(name: AdminRequestSignature.timestampHeader, value: h.timestamp)
            request.headers.add(name: AdminRequestSignature.nonceHeader, value: h.nonce)
            request.headers.add(name: AdminRequestSignature.signatureHeader, value: h.signature)
        }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: .seconds(60))
        } catch {
            throw Self.classify(error)
        }
        let body = try await response.body.collect(upTo: APILimits.maxBodyBytes * 2)
        let bytes = Array(body.readableBytesView)
        guard (200..<300).contains(Int(response.status.code)) else {
            throw Self.map(status: Int(response.status.code), body: bytes, retryAfter: response.headers.first(name: "Retry-After"))
        }
        return bytes
    }

    /// Connection-level failures: unreachable when nothing answered, temporary when a connection broke.
    static func classify(_ error: any Error) -> ClientError {
        if let e = error as? HTTPClientError {
            switch e {
            case .connectTimeout: return .serverUnreachable("connection timed out")
            case .readTimeout, .writeTimeout, .remoteConnectionClosed, .deadlineExceeded, .getConnectionFromPoolTimeout:
                return .temporary("the connection failed (\(e))")
            default: return .serverUnreachable("\(e)")
            }
        }
        if error is IOError || error is ChannelError { return .serverUnreachable("connection refused or no route to the server") }
        return .serverUnreachable("\(type(of: error))")
    }

    /// The one mapping from HTTP status and API error code to `ClientError`.
    static func map(status: Int, body: [UInt8], retryAfter: String?) -> ClientError {
        let detail = try? decoder.decode(APIErrorBody.self, from: Data(body)).error
        let message = detail?.message ?? "HTTP \(status)"
        let code = detail?.code
        switch (status, code) {
        case (_, .pendingApproval?), (_, .accountRejected?), (_, .shareNotActive?), (_, .invalidCredentials?), (401, _), (403, _):
            return .notPermitted(code: code, message)
        case (429, _), (502, _), (503, _), (504, _):
            return .temporary(message + (retryAfter.map { " (retry after \($0) s)" } ?? ""))
        case (404, _): return .notFound(message)
        case (409, _): return .conflict(message)
        case (_, .invalidSignature?), (_, .invalidApproval?): return .integrity(message)
        case (400..<500, _): return .invalidRequest(message)
        default: return .server(code: code, message)
        }
    }
}
