import Foundation
import HTTPTypes
import Hummingbird
import VaultAPI

/// `GET /v1/events`: the caller's live event stream (Docs/events.md), behind the session like every
/// other route of /v1.
struct EventsController: APIController {
    let service: VaultService

    static let lastEventID = HTTPField.Name("Last-Event-ID")!

    func addRoutes(to group: RouterGroup<Context>) {
        group.get(RouterPath(Routes.events), use: stream)
    }

    @Sendable func stream(_ request: Request, context: Context) async throws -> Response {
        let writer = try await service.openEventStream(try context.requireCaller(), lastEventID: request.headers[Self.lastEventID])
        let headers: HTTPFields = [.contentType: "text/event-stream; charset=utf-8", .cacheControl: "no-store"]
        return Response(
            status: .ok,
            headers: headers,
            body: ResponseBody { body in
                // A client that closes its end (FIN: the socket would sit in CLOSE-WAIT until the next
                // heartbeat's write failed, 15-36 s) ends its stream at once and gives its slot back
                // (Docs/events.md §6). No middleware reads the body of this GET, which this needs untouched.
                try await request.body.consumeWithInboundCloseHandler { _ in
                    try await writer.run { try await body.write($0) }
                } onInboundClosed: { [subscription = writer.subscription] in
                    subscription.close()
                }
                try await body.finish(nil)
            }
        )
    }
}
