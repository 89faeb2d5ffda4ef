import Hummingbird
import VaultAPI

/// `GET /health`, open to anyone: load balancers and scripts ask whether the database answers.
struct HealthController: APIController {
    let service: VaultService

    func addRoutes(to group: RouterGroup<Context>) {
        group.get(RouterPath(Routes.health), use: health)
        group.get(RouterPath(Routes.deployment), use: deployment)
    }

    /// The id signed admin requests must name (Docs/envelope-v1.md §3.5).
    @Sendable func deployment(_ request: Request, context: Context) async throws -> DeploymentResponse {
        DeploymentResponse(deploymentID: try await service.deploymentID())
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
