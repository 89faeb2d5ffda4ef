import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import VaultAPI
import VaultCore
import VaultCrypto

/// How long keys are kept and which answers are (Docs/design.md §6.2, Docs/operations.md §5).
public enum IdempotencyKeys {
    /// A key and its answer are kept 24 hours from the first request, then purged by the retention service.
    public static let retention: UnixMillis = 24 * 3_600_000
    /// A claim whose request has not answered within this time is taken to have died with its server
    /// process, and the next try with the key runs the request again.
    public static let abandonedAfter: UnixMillis = 120_000
    /// The largest answer kept; a larger one (or one of no declared length) is passed on and not kept.
    static let maxAnswerBytes = 256 * 1024

    /// Whether an answer of `status` is kept for retries: a success only. A refusal changed nothing, so a
    /// retry that runs again is harmless, and nothing an unauthenticated caller is refused is stored.
    static func keeps(_ status: Int) -> Bool { (200..<300).contains(status) }

    /// Routes whose POST takes no key: a push (idempotent by its version ids, and up to 32 MiB), a
    /// registration (the same registration sent again is answered 200 by design), and the two reads of the
    /// open routes (login parameters, the recovery bundle), which change nothing.
    static let routesWithoutKeys: Set<String> = [Routes.records, Routes.register, Routes.loginParameters, Routes.recoveryBundle]

    /// The route `request` reached: the router's template (so `//v1/records/` is the push too).
    static func route(_ request: Request, _ context: some RequestContext) -> String {
        context.endpointPath ?? request.uri.path
    }

    static let keyField = HTTPField.Name(Idempotency.header)!
    static let replayedField = HTTPField.Name(Idempotency.replayedHeader)!

    /// The key of `request` when it is one to honour: a POST or PUT with the header, to a route that takes
    /// keys. A malformed key is refused (400) before anything runs.
    static func key(of request: Request, _ context: some RequestContext) throws -> String? {
        guard request.method == .post || request.method == .put, let key = request.headers[keyField],
            !routesWithoutKeys.contains(route(request, context))
        else { return nil }
        guard Idempotency.isValid(key) else {
            throw APIError.badRequest(
                "\(Idempotency.header) must be \(Idempotency.keyLength.lowerBound) to \(Idempotency.keyLength.upperBound) characters of A-Z, a-z, 0-9, - and _"
            )
        }
        return key
    }

    /// The kept answer as a response.
    static func replay(_ answer: StoredAnswer, status: Int) -> Response {
        var headers = HTTPFields()
        if let type = answer.contentType { headers[.contentType] = type }
        headers[replayedField] = "true"
        return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }
}

/// Answers a retried non-idempotent request (POST or PUT with an `Idempotency-Key`) with the answer of its
/// first try instead of running it again (Docs/design.md §6.2).
///
/// - On session routes it runs after authentication (nothing is written for a caller without a session);
///   `EndedSessionReplay`, before authentication, answers the retry of a request that ended its own
///   session (logout, account deletion) from what is kept, reading only.
/// - The key is stored hashed with its scope (the session token's hash, `admin`, or `open`), never in the
///   clear, beside a keyed hash of the method, path and body (the fingerprint). A key sent with another
///   fingerprint is 409 `idempotency_key_reused`.
/// - The first try's successful answer is kept sealed (XChaCha20-Poly1305) under a key derived from the
///   `Idempotency-Key` and the request body, neither of which the store holds. A kept answer that does not
///   open (edited in the database) is a 500, never sent.
/// - While the first try runs, a retry gets 409 `request_in_progress` with `Retry-After: 1`.
struct IdempotencyMiddleware: RouterMiddleware {
    typealias Context = VaultRequestContext

    enum Scope: Sendable {
        case session
        case admin
        case open
    }

    let service: VaultService
    let scope: Scope

    init(service: VaultService, scope: Scope) {
        self.service = service
        self.scope = scope
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let key = try IdempotencyKeys.key(of: request, context) else { return try await next(request, context) }
        let scopeName: String
        let limit: Int
        switch scope {
        case .session:
            guard let caller = context.caller else { return try await next(request, context) }
            (scopeName, limit) = ("session:" + caller.tokenHash, APILimits.maxBodyBytes)
        case .admin: (scopeName, limit) = ("admin", APILimits.maxAdminBodyBytes)
        case .open: (scopeName, limit) = ("open", APILimits.maxOpenBodyBytes)
        }
        var request = request
        let body = try await request.bodyBytes(upTo: limit)
        let keys = StoredAnswerKeys(scope: scopeName, key: key, body: body)
        let fingerprint = keys.fingerprint(method: request.method.rawValue, path: request.uri.description, body: body)
        let now = service.clock()
        let claimed = try await service.repository.claimIdempotencyKey(
            keys.id,
            fingerprint: fingerprint,
            now: now,
            abandonedBefore: now - IdempotencyKeys.abandonedAfter
        )
        let claim: [UInt8]
        switch claimed {
        case let .answered(status, sealed):
            guard let answer = keys.open(sealed, status: status) else {
                context.logger.error("a kept answer of an idempotency key does not open (edited in the database?)")
                throw APIError.internal
            }
            context.logger.info("answered a retry from its first try", metadata: ["status": "\(status)"])
            return IdempotencyKeys.replay(answer, status: status)
        case .inProgress:
            var error = APIError(.conflict, .requestInProgress, "a request with this \(Idempotency.header) is still running; retry shortly")
            error.headers[.retryAfter] = "1"
            throw error
        case .reused:
            throw APIError(.conflict, .idempotencyKeyReused, "this \(Idempotency.header) was used for another request")
        case let .claimed(token):
            claim = token
        }
        let response: Response
        do {
            // Errors become answers here, so the claim is settled whatever the handler did.
            response = try await ErrorMiddleware<Context>().handle(request, context: context, next: next)
        } catch {
            await release(keys.id, claim, context)
            throw error
        }
        let status = response.status.code
        guard IdempotencyKeys.keeps(status), let length = response.body.contentLength, length <= IdempotencyKeys.maxAnswerBytes else {
            await release(keys.id, claim, context)
            return response
        }
        let collected = CollectedBody()
        var headers = response.headers
        try await response.body.write(CollectingWriter(into: collected))
        let bytes = collected.bytes
        headers[.contentLength] = "\(bytes.count)"
        let sealed = keys.seal(StoredAnswer(contentType: headers[.contentType], body: bytes), status: status)
        // The request has run: its answer goes to the client whatever happens to the copy kept here. A
        // copy that could not be kept leaves the claim to be taken over once abandoned.
        var kept = false
        for _ in 0..<2 where !kept {
            do {
                if try await service.repository.answerIdempotencyKey(keys.id, claim: claim, status: status, sealed: sealed) {
                    kept = true
                } else {
                    context.logger.warning("an idempotency claim was taken over before its answer was kept")
                    break
                }
            } catch {
                context.logger.error("could not keep the answer of an idempotency key", metadata: ["error": "\(String(reflecting: type(of: error)))"])
            }
        }
        return Response(status: response.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    private func release(_ id: [UInt8], _ claim: [UInt8], _ context: Context) async {
        do { try await service.repository.releaseIdempotencyKey(id, claim: claim) } catch {
            context.logger.error("could not release an idempotency claim", metadata: ["error": "\(String(reflecting: type(of: error)))"])
        }
    }
}

/// Before the session check: the retry of a request whose first try ended its own session (logout, account
/// deletion) is refused 401 by the authenticator; when a successful answer is kept for its key, token and
/// request, that answer is sent instead. Reads only, and only a body of at most 64 KiB declared as such:
/// nothing is written for a caller without a session.
struct EndedSessionReplay: RouterMiddleware {
    typealias Context = VaultRequestContext

    let service: VaultService

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let refusal as APIError where refusal.status == .unauthorized {
            guard let key = try? IdempotencyKeys.key(of: request, context),
                let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer "),
                let declared = request.headers[.contentLength].flatMap({ Int($0) }), declared <= APILimits.maxOpenBodyBytes
            else { throw refusal }
            let token = String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
            guard !token.isEmpty, token.count <= 128 else { throw refusal }
            // Only a refusal of the session itself: a handler's own 401 (a wrong password) has read the body.
            if (try? await SessionAuthenticator(service: service).authenticate(request)) != nil { throw refusal }
            var request = request
            guard let body = try? await request.bodyBytes(upTo: APILimits.maxOpenBodyBytes) else { throw refusal }
            let keys = StoredAnswerKeys(scope: "session:" + VaultService.tokenHash(token), key: key, body: body)
            let fingerprint = keys.fingerprint(method: request.method.rawValue, path: request.uri.description, body: body)
            guard case let .answered(status, sealed) = try await service.repository.keptIdempotencyAnswer(keys.id, fingerprint: fingerprint),
                let answer = keys.open(sealed, status: status)
            else { throw refusal }
            context.logger.info("answered a retry from its first try, which ended its session", metadata: ["status": "\(status)"])
            return IdempotencyKeys.replay(answer, status: status)
        }
    }
}

/// An answer as kept: its content type and body.
struct StoredAnswer: Sendable, Equatable {
    var contentType: String?
    var body: [UInt8]
}

/// What one `Idempotency-Key` in one scope derives: the row id, the key of the fingerprint and the key
/// that seals the kept answer (Docs/design.md §6.2). The sealing key also takes the request's body, so the
/// header alone (logged by a proxy, say) opens nothing: a login's body holds its login key.
struct StoredAnswerKeys {
    let id: [UInt8]
    private let fingerprintKey: SymmetricKey
    private let sealing: SymmetricKey

    init(scope: String, key: String, body: [UInt8]) {
        func derived(_ domain: String, _ parts: [[UInt8]]) -> [UInt8] {
            var w = CanonicalWriter(domain: domain)
            for part in parts { w.append(part) }
            defer { w.wipe() }
            return try! BLAKE2b.hash(w.bytes)
        }
        let scope = Array(scope.utf8)
        let key = Array(key.utf8)
        id = derived("CareVault-idempotency-key-v1", [scope, key])
        fingerprintKey = try! SymmetricKey(bytes: derived("CareVault-idempotency-fingerprint-key-v1", [scope, key]))
        sealing = try! SymmetricKey(bytes: derived("CareVault-idempotency-seal-v1", [scope, key, body]))
    }

    /// BLAKE2b-256, keyed with the fingerprint key, of the method, the path with its query and the body.
    func fingerprint(method: String, path: String, body: [UInt8]) -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-idempotency-request-v1")
        w.append(Array(method.utf8))
        w.append(Array(path.utf8))
        w.append(body)
        return try! BLAKE2b.hash(w.bytes, key: fingerprintKey)
    }

    /// The nonce, then the ciphertext of the content type (length-prefixed) and the body; the row id and
    /// the status are bound in as associated data, so an answer moved to another row or status fails.
    func seal(_ answer: StoredAnswer, status: Int) -> [UInt8] {
        var plain = CanonicalWriter(domain: "CareVault-idempotency-answer-v1")
        plain.append(Array((answer.contentType ?? "").utf8))
        plain.append(answer.body)
        let nonce = AEADNonce.random()
        return nonce.bytes + AEAD.seal(plain.bytes, key: sealing, nonce: nonce, associatedData: associatedData(status))
    }

    func open(_ sealed: [UInt8], status: Int) -> StoredAnswer? {
        guard sealed.count > AEADNonce.byteCount, let nonce = try? AEADNonce(bytes: Array(sealed.prefix(AEADNonce.byteCount))),
            let plain = try? AEAD.open(
                Array(sealed.dropFirst(AEADNonce.byteCount)),
                key: sealing,
                nonce: nonce,
                associatedData: associatedData(status)
            )
        else { return nil }
        guard var reader = try? CanonicalReader(plain, domain: "CareVault-idempotency-answer-v1"), let type = try? reader.readBytes(),
            let body = try? reader.readBytes(), (try? reader.finish()) != nil
        else { return nil }
        let text = String(decoding: type, as: UTF8.self)
        return StoredAnswer(contentType: text.isEmpty ? nil : text, body: body)
    }

    private func associatedData(_ status: Int) -> [UInt8] { id + withUnsafeBytes(of: Int64(status).bigEndian, Array.init) }
}

/// A response body, gathered.
final class CollectedBody: @unchecked Sendable {
    private let lock = NSLock()
    private var gathered: [UInt8] = []
    var bytes: [UInt8] { lock.withLock { gathered } }
    func add(_ buffer: ByteBuffer) { lock.withLock { gathered += buffer.readableBytesView } }
}

struct CollectingWriter: ResponseBodyWriter {
    let into: CollectedBody
    mutating func write(_ buffer: ByteBuffer) async throws { into.add(buffer) }
    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
