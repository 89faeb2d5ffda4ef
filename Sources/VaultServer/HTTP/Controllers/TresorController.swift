import Hummingbird
import VaultAPI
import VaultCore

/// A patient's tresors and the records in them (Docs/design.md §4, §5), and who read them; every route
/// needs a session.
struct TresorController: APIController {
    let service: VaultService

    func addRoutes(to group: RouterGroup<Context>) {
        group.put(RouterPath(Routes.tresors), use: putTresor)
            .get(RouterPath(Routes.tresors), use: tresors)
            .post(RouterPath(Routes.records), use: push)
            .get(RouterPath(Routes.records), use: pull)
            .get(RouterPath(Routes.accessLog), use: accessLog)
            .get(RouterPath(Routes.accessLogChain), use: accessLogChain)
            .get(RouterPath(Routes.accessLogCheckpoints), use: accessLogCheckpoints)
    }

    @Sendable func putTresor(_ request: Request, context: Context) async throws -> TresorInfo {
        let caller = try context.requireCaller()
        return try await service.putTresor(caller, try await request.decode(as: PutTresorRequest.self, context: context))
    }

    @Sendable func tresors(_ request: Request, context: Context) async throws -> TresorList {
        try await service.tresors(try context.requireCaller())
    }

    /// A binary batch (Docs/envelope-v1.md §7.2), the only body a push takes.
    @Sendable func push(_ request: Request, context: Context) async throws -> PushResponse {
        let caller = try context.requireCaller()
        guard RecordMediaType.names(request.headers[.contentType], RecordMediaType.batch) else {
            throw APIError(
                .unsupportedMediaType,
                .unsupportedMediaType,
                "a push is a batch of envelopes sent as \(RecordMediaType.batch) (Docs/envelope-v1.md §7.2); upgrade the client"
            )
        }
        var request = request
        return try await service.push(caller, batch: try await request.bodyBytes(upTo: EnvelopeFrame.maxBytes))
    }

    /// A binary page (Docs/envelope-v1.md §7.3), the only answer a pull has: a request whose `Accept`
    /// excludes it (one that names only JSON, as clients before 0.10.0 did) is refused before anything is
    /// read; no `Accept` at all, or a range that covers it, is answered with the page.
    @Sendable func pull(_ request: Request, context: Context) async throws -> Response {
        guard RecordMediaType.accepts(request.headers[.accept], RecordMediaType.page) else {
            throw APIError(
                .notAcceptable,
                .unsupportedMediaType,
                "a pull answers a page of changes as \(RecordMediaType.page) (Docs/envelope-v1.md §7.3): send Accept: \(RecordMediaType.page); upgrade the client"
            )
        }
        let page = try await service.pull(
            try context.requireCaller(),
            owner: try request.queryUUID("owner"),
            tresor: try request.queryUUID("tresor"),
            since: try request.query("since", default: 0),
            limit: try request.queryLimit(default: APILimits.defaultPullLimit),
            maxBytes: PullPageBytes.clamped(Int(clamping: try request.query("maxBytes", default: UInt64(PullPageBytes.default))))
        )
        return page.binaryResponse()
    }

    @Sendable func accessLog(_ request: Request, context: Context) async throws -> AuditPage {
        try await service.accessLog(
            try context.requireCaller(),
            after: try request.query("after", default: 0),
            limit: try request.queryLimit(default: 200)
        )
    }

    @Sendable func accessLogChain(_ request: Request, context: Context) async throws -> AuditLinkPage {
        try await service.accessLogChain(
            try context.requireCaller(),
            after: try request.query("after", default: 0),
            limit: try request.queryLimit(default: APILimits.defaultLinkLimit)
        )
    }

    @Sendable func accessLogCheckpoints(_ request: Request, context: Context) async throws -> AuditCheckpointList {
        try await service.accessLogCheckpoints(try context.requireCaller())
    }
}
