import Foundation
import Hummingbird
import NIOCore
import VaultAPI
import VaultCore

/// The request context of every route: Hummingbird's core storage, the peer address (for login rate
/// limits), the JSON coders of the API and what the route group's authenticator established: the
/// session's caller on the /v1 routes, the signed request on /v1/admin (Docs/design.md §6).
public struct VaultRequestContext: RequestContext, RemoteAddressRequestContext {
    /// Hummingbird's per-request storage (logger, path parameters).
    public var coreContext: CoreRequestContextStorage
    /// The peer that sent the request.
    public let remoteAddress: SocketAddress?
    /// The largest body a handler decodes.
    public var maxUploadSize: Int { APILimits.maxBodyBytes }
    /// Decodes JSON bodies with the API's 400, 413 and 415 answers.
    public var requestDecoder: VaultRequestDecoder { VaultRequestDecoder() }
    /// Encodes every JSON answer the same way.
    public var responseEncoder: VaultResponseEncoder { VaultResponseEncoder() }
    /// Set by `SessionAuthenticator`.
    var caller: Caller?
    /// Set by `AdminSignatureAuthenticator`.
    var adminRequest: SignedAdminRequest?

    /// The context of a request arriving on `source`'s channel.
    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
        clientAddress = remoteAddress?.ipAddress ?? "unknown"
    }

    /// The client address as text, for rate limiting and the audit log: the peer's, or the one a trusted
    /// proxy forwarded (`ForwardedAddressMiddleware`).
    var clientAddress: String

    /// The session's caller. Only a route outside the session group finds none, which is a wiring
    /// mistake; it still answers 401 rather than trusting an anonymous request.
    func requireCaller() throws -> Caller {
        guard let caller else { throw APIError.unauthorized }
        return caller
    }

    /// The verified admin request, under the same rule as `requireCaller`.
    func requireAdmin() throws -> SignedAdminRequest {
        guard let adminRequest else { throw APIError(.unauthorized, .unauthorized, AdminSignatureAuthenticator.unsignedMessage) }
        return adminRequest
    }
}

extension Request {
    /// The raw body bytes, refusing more than `limit` (the API's limit unless given) with a 413.
    mutating func bodyBytes(upTo limit: Int = APILimits.maxBodyBytes) async throws -> [UInt8] {
        do {
            return Array(try await collectBody(upTo: limit).readableBytesView)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, .payloadTooLarge, "request body is larger than \(limit) bytes")
        } catch let e as HTTPError where e.status == .contentTooLarge {
            throw APIError(.contentTooLarge, .payloadTooLarge, "request body is larger than \(limit) bytes")
        }
    }

    /// Whether the body is declared as JSON.
    var hasJSONBody: Bool { headers[.contentType]?.lowercased().hasPrefix("application/json") ?? false }

    /// A query parameter parsed as an unsigned integer, with a 400 naming it when malformed.
    func query(_ name: String, default value: UInt64) throws -> UInt64 {
        guard let text = uri.queryParameters.get(name) else { return value }
        // Sequences are stored as signed 64-bit integers: anything larger is not a cursor.
        guard let n = UInt64(text), n <= UInt64(Int64.max) else {
            throw APIError.badRequest("query parameter '\(name)' must be an integer from 0 to \(Int64.max)")
        }
        return n
    }

    /// A page size from the `limit` query parameter.
    func queryLimit(default value: Int) throws -> Int {
        Int(clamping: try query("limit", default: UInt64(value)))
    }

    /// A query parameter parsed as a UUID.
    func queryUUID(_ name: String) throws -> UUID? {
        guard let text = uri.queryParameters.get(name) else { return nil }
        guard let id = UUID(uuidString: text) else { throw APIError.badRequest("query parameter '\(name)' must be a UUID") }
        return id
    }
}

extension Parameters {
    /// A path parameter parsed as a UUID (400 when malformed).
    func uuid(_ name: String) throws -> UUID {
        guard let text = get(name), let id = UUID(uuidString: text) else { throw APIError.badRequest("'\(name)' in the path must be a UUID") }
        return id
    }
}
