import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import VaultAPI
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

/// A server that lies about shares in its answers, not only in its database: the real server for every
/// request, except that the share list it sends is first handed to `bend`, and a revocation can be made to
/// fail. It logs every request, so a test can tell what a client sent.
struct HostileShareServer: HTTPResponder {
    typealias Context = VaultRequestContext

    /// What the hostile server does now.
    struct Mode: Sendable {
        /// Rewrites the share list the server answers `GET /v1/shares` with.
        var bend: (@Sendable (ShareList) -> ShareList)?
        /// Answers every revocation with 503, storing nothing.
        var failRevocations = false
        /// Every request seen, as "METHOD path".
        var log: [String] = []
        /// Run once, after the real answer to the next `GET /v1/tresors` was read and before it is sent: what
        /// another process of the device does while that answer is on its way.
        var whileTresorListTravels: (@Sendable () async throws -> Void)?
        /// Stores the next share request (`POST /v1/shares`) and then answers 503 with `Retry-After: 0`, as if
        /// the answer was lost on the way: the client sends it again.
        var loseNextShareAnswer = false
        /// Rewrites the answer to a share request (the share id is the server's choice, not signed).
        var bendFiledShare: (@Sendable (ShareInfo) -> ShareInfo)?
        /// Answers every `GET /v1/tresors` with the first answer given once this was set (a replayed list).
        var replayTresorList = false
        var capturedTresorList: [UInt8]?
    }

    let inner: RouterResponder<VaultRequestContext>
    let mode: NIOLockedValueBox<Mode>

    func respond(to request: Request, context: VaultRequestContext) async throws -> Response {
        let path = request.uri.path
        let mode = self.mode.withLockedValue { m in
            m.log.append("\(request.method.rawValue) \(path)")
            return m
        }
        if request.method == .post, path.hasPrefix(Routes.shares + "/"), path.hasSuffix("/revoke"), mode.failRevocations {
            return Response(status: .serviceUnavailable, headers: [.retryAfter: "0"])
        }
        if request.method == .post, path == Routes.shares, let bend = mode.bendFiledShare {
            let filed = try await inner.respond(to: request, context: context)
            guard filed.status == .created else { return filed }
            return try await Self.rewrite(filed, as: ShareInfo.self, bend)
        }
        if request.method == .post, path == Routes.shares, mode.loseNextShareAnswer {
            self.mode.withLockedValue { $0.loseNextShareAnswer = false }
            let stored = try await inner.respond(to: request, context: context)
            guard stored.status == .created else { return stored }
            return Response(status: .serviceUnavailable, headers: [.retryAfter: "0"])
        }
        if request.method == .get, path == Routes.tresors, mode.whileTresorListTravels != nil || mode.replayTresorList {
            return try await tresorList(request, context: context)
        }
        let response = try await inner.respond(to: request, context: context)
        guard request.method == .get, path == Routes.shares, let bend = mode.bend, response.status == .ok else { return response }
        return try await Self.rewrite(response, as: ShareList.self, bend)
    }

    /// `response` with its JSON body decoded as `T`, changed by `bend` and sent on with the same status.
    private static func rewrite<T: Codable>(_ response: Response, as type: T.Type, _ bend: (T) -> T) async throws -> Response {
        let collected = Collected()
        try await response.body.write(CollectingWriter(into: collected))
        let honest = try JSONDecoder().decode(T.self, from: Data(collected.bytes.withLockedValue { $0 }))
        let bent = try JSONEncoder().encode(bend(honest))
        var headers = response.headers
        headers[.contentLength] = "\(bent.count)"
        return Response(status: response.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bent)))
    }

    private func tresorList(_ request: Request, context: VaultRequestContext) async throws -> Response {
        let response = try await inner.respond(to: request, context: context)
        let collected = Collected()
        try await response.body.write(CollectingWriter(into: collected))
        var body = collected.bytes.withLockedValue { $0 }
        let hook = mode.withLockedValue { m -> (@Sendable () async throws -> Void)? in
            if m.replayTresorList, response.status == .ok {
                if let captured = m.capturedTresorList { body = captured } else { m.capturedTresorList = body }
            }
            defer { m.whileTresorListTravels = nil }
            return m.whileTresorListTravels
        }
        try await hook?()
        var headers = response.headers
        headers[.contentLength] = "\(body.count)"
        return Response(status: response.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    /// A world whose server is this one; `mode` starts honest.
    static func run(_ backend: Backend, _ body: @escaping @Sendable (ClientWorld, NIOLockedValueBox<Mode>) async throws -> Void) async throws {
        try await TestDatabase.with(backend) { repo in
            let admin = SigningKeyPair.generate()
            let mode = NIOLockedValueBox(Mode())
            let server = HostileShareServer(inner: buildRouter(repository: repo, adminKey: admin.publicKey).buildResponder(), mode: mode)
            let app = Application(responder: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
            try await app.test(.live) { client in
                let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-hostile-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: root) }
                try await body(ClientWorld(repository: repo, baseURL: "http://127.0.0.1:\(client.port!)", admin: admin, root: root), mode)
            }
        }
    }

    final class Collected: Sendable {
        let bytes = NIOLockedValueBox<[UInt8]>([])
    }

    struct CollectingWriter: ResponseBodyWriter {
        let into: Collected
        mutating func write(_ buffer: ByteBuffer) async throws { into.bytes.withLockedValue { $0 += Array(buffer.readableBytesView) } }
        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }
}
