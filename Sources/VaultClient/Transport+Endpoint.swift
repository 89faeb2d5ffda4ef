import Foundation
import NIOHTTP1
import VaultAPI

/// Typed calls: a route's method, path and answer type come from its `Endpoint` (VaultAPI), said once
/// per route instead of at every call site.
extension Transport {
    /// Sends `body` to `endpoint` and reads the answer as the endpoint's answer type (`NoAnswer`: not read).
    public func send<Body, Answer>(_ endpoint: Endpoint<Body, Answer>, _ body: Body, auth: Auth = .none) async throws -> Answer {
        let method = HTTPMethod(rawValue: endpoint.method.rawValue)
        let payload = body is NoBody ? [] : Array(try Self.encoder.encode(body))
        let answer = try await sendRaw(method, endpoint.path, payload: payload, auth: auth)
        if let nothing = NoAnswer() as? Answer { return nothing }
        return try Self.decode(answer, method, endpoint.path)
    }

    /// Sends a request without a body to `endpoint`.
    public func send<Answer>(_ endpoint: Endpoint<NoBody, Answer>, auth: Auth = .none) async throws -> Answer {
        try await send(endpoint, NoBody(), auth: auth)
    }
}
