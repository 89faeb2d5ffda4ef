import Hummingbird
import VaultAPI

/// `GET /health`, open to anyone: load balancers and scripts ask whether the database answers.
struct HealthController: APIController {
    let service: VaultService

    func addRoutes(to group: RouterGroup<Context>) {
        group.get(RouterPath(Routes.health), use: health)
    }

    @Sendable func health(_ request: Request, context: Context) async throws -> HealthResponse {
        do { try await service.repository.ping() } catch {
            var e = APIError.unavailable
            e.message = "database is not reachable"
            throw e
        }
        return HealthResponse(status: "ok", database: service.repository.backendName, version: "1")
    }
}
