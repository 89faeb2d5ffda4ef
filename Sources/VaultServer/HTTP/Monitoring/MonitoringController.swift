import Foundation
import Hummingbird
import NIOCore

/// `GET /ready` and `GET /metrics`, open to anyone like `/health` (Docs/operations.md): a load balancer
/// asks /ready whether to send traffic here, a Prometheus server scrapes /metrics. Neither answer names a
/// user, a record or an id.
struct MonitoringController: APIController {
    static let ready = "/ready"
    static let metrics = "/metrics"

    let service: VaultService
    let metrics: ServerMetrics

    /// The body of /ready: `ready`, or `not ready` with the reason.
    struct Readiness: Codable, Sendable {
        var status: String
        var database: String
        var reason: String?
    }

    func addRoutes(to group: RouterGroup<Context>) { addRoutes(to: group, metrics: true) }

    /// The routes; `/metrics` only with `metrics` (not when it has a listener of its own).
    func addRoutes(to group: RouterGroup<Context>, metrics: Bool) {
        group.get(RouterPath(Self.ready), use: ready)
        if metrics { group.get(RouterPath(Self.metrics), use: exposition) }
    }

    /// 200 when the database answers a trivial query, else 503 with the reason and a Retry-After.
    @Sendable func ready(_ request: Request, context: Context) async throws -> Response {
        let backend = service.repository.backendName
        do {
            try await service.repository.ping()
            return try Self.json(.ok, Readiness(status: "ready", database: backend))
        } catch {
            var response = try Self.json(.serviceUnavailable, Readiness(status: "not ready", database: backend, reason: "database is not reachable"))
            response.headers[.retryAfter] = "1"
            return response
        }
    }

    @Sendable func exposition(_ request: Request, context: Context) async throws -> Response {
        Self.expositionResponse(metrics)
    }

    /// The Prometheus text of `metrics`.
    static func expositionResponse(_ metrics: ServerMetrics) -> Response {
        Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: metrics.exposition()))
        )
    }

    static func json(_ status: HTTPResponse.Status, _ value: Readiness) throws -> Response {
        var response = VaultResponseEncoder.response(ByteBuffer(bytes: try VaultResponseEncoder.json.encode(value)))
        response.status = status
        return response
    }
}
