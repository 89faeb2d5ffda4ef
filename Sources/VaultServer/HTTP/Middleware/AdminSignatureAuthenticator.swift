import Foundation
import HTTPTypes
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// An admin request whose signature verified: the body that was signed, for the handler to decode.
struct SignedAdminRequest: Sendable {
    let body: [UInt8]

    /// The signed body as `T`, with the same 400s as any other JSON body.
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONBody.decode(T.self, from: body)
    }
}

/// Guards /v1/admin: a timestamp inside the window and an Ed25519 signature by the pinned admin key
/// over that key, this deployment's id, method, path with query, body hash and timestamp, each signature
/// accepted once (Docs/design.md §2, §6; Docs/envelope-v1.md §3.5). The handler finds the signed body
/// in `VaultRequestContext.adminRequest`. The headers and the window are checked, and a body is refused
/// past 64 KiB, before the body is read, so an unsigned caller cannot make the server hold much.
struct AdminSignatureAuthenticator: RouterMiddleware {
    typealias Context = VaultRequestContext

    static let unsignedMessage = "admin requests must be signed with the admin key"
    static let tooLarge = APIError(.contentTooLarge, .payloadTooLarge, "admin request bodies are at most \(APILimits.maxAdminBodyBytes) bytes")

    let service: VaultService

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var request = request
        var context = context
        context.adminRequest = try await authenticate(&request)
        return try await next(request, context)
    }

    func authenticate(_ request: inout Request) async throws -> SignedAdminRequest {
        // Headers and the time window first, so an unauthenticated caller cannot make the server buffer a body.
        guard let tsText = request.headers[HTTPField.Name(AdminRequestSignature.timestampHeader)!], let ts = Int64(tsText),
            let sigText = request.headers[HTTPField.Name(AdminRequestSignature.signatureHeader)!],
            let signature = try? Signature(base64URL: sigText),
            let nonce = request.headers[HTTPField.Name(AdminRequestSignature.nonceHeader)!], (try? Base64URL.decode(nonce))?.count == 16
        else { throw APIError(.unauthorized, .unauthorized, Self.unsignedMessage) }
        let now = service.clock()
        // Compare without arithmetic on the untrusted value: no overflow whatever the header says.
        guard ts >= now - AdminRequestSignature.windowMs, ts <= now + AdminRequestSignature.windowMs else {
            throw APIError(.unauthorized, .unauthorized, "admin request timestamp is outside the allowed window; check the clock")
        }
        // A declared length over the cap is refused before a byte of the body is read.
        if let declared = request.headers[.contentLength], (Int(declared) ?? .max) > APILimits.maxAdminBodyBytes {
            throw Self.tooLarge
        }
        let body: [UInt8]
        do {
            body = Array(try await request.collectBody(upTo: APILimits.maxAdminBodyBytes).readableBytesView)
        } catch {
            throw Self.tooLarge
        }
        if !body.isEmpty, !request.hasJSONBody {
            throw APIError(.unsupportedMediaType, .unsupportedMediaType, "request body must be application/json")
        }
        let pathAndQuery = request.uri.query.map { "\(request.uri.path)?\($0)" } ?? request.uri.path
        let statement = AdminRequestSignature.statement(
            adminKey: service.adminKey,
            deploymentID: try await service.deploymentID(),
            method: request.method.rawValue,
            pathAndQuery: pathAndQuery,
            body: body,
            timestamp: ts,
            nonce: nonce
        )
        guard service.adminKey.isValidSignature(signature, for: statement) else {
            throw APIError(.unauthorized, .invalidSignature, "admin signature does not verify under the configured admin key")
        }
        let purgeBefore = now - RetentionService.adminSignatureRetentionMs
        guard try await service.repository.rememberAdminSignature(signature.base64URL, at: now, purgeBefore: purgeBefore) else {
            throw APIError(.unauthorized, .unauthorized, "admin request was already used (replay)")
        }
        return SignedAdminRequest(body: body)
    }
}
