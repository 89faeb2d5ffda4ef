import Foundation
import Hummingbird
import NIOCore
import VaultAPI
import VaultCore

/// The request context of every route: Hummingbird's core storage, the peer address (for login rate
/// limits) and the authenticated user once a route has checked the session.
public struct VaultRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?
    public var maxUploadSize: Int { APILimits.maxBodyBytes }

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// The client address as text, for rate limiting and the audit log.
    var clientAddress: String { remoteAddress?.ipAddress ?? "unknown" }
}

extension Request {
    /// Reads the whole body (refusing more than the limit) and decodes JSON, with errors that name the
    /// problem: wrong content type (415), too large (413), malformed JSON or wrong types (400).
    mutating func decodeJSON<T: Decodable>(_ type: T.Type) async throws -> T {
        guard let contentType = headers[.contentType], contentType.lowercased().hasPrefix("application/json") else {
            throw APIError(.unsupportedMediaType, .unsupportedMediaType, "request body must be application/json")
        }
        return try JSONBody.decode(T.self, from: try await bodyBytes())
    }

    /// The raw body bytes (for admin signatures), with the same limit.
    mutating func bodyBytes() async throws -> [UInt8] {
        do {
            return Array(try await collectBody(upTo: APILimits.maxBodyBytes).readableBytesView)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, .payloadTooLarge, "request body is larger than \(APILimits.maxBodyBytes) bytes")
        } catch let e as HTTPError where e.status == .contentTooLarge {
            throw APIError(.contentTooLarge, .payloadTooLarge, "request body is larger than \(APILimits.maxBodyBytes) bytes")
        }
    }

    /// A query parameter parsed as an unsigned integer, with a 400 naming it when malformed.
    func query(_ name: String, default value: UInt64) throws -> UInt64 {
        guard let text = uri.queryParameters.get(name) else { return value }
        // Sequences are stored as signed 64-bit integers: anything larger is not a cursor.
        guard let n = UInt64(text), n <= UInt64(Int64.max) else {
            throw APIError.badRequest("query parameter '\(name)' must be an integer from 0 to \(Int64.max)")
        }
        return n
    }

    /// A query parameter parsed as a UUID.
    func queryUUID(_ name: String) throws -> UUID? {
        guard let text = uri.queryParameters.get(name) else { return nil }
        guard let id = UUID(uuidString: text) else { throw APIError.badRequest("query parameter '\(name)' must be a UUID") }
        return id
    }
}

/// Decoding of JSON request bodies with errors that say what is wrong and where, never echoing values.
enum JSONBody {
    static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        guard !bytes.isEmpty else { throw APIError(.badRequest, .invalidJSON, "request body is empty: a JSON object is required") }
        do {
            return try JSONDecoder().decode(T.self, from: Data(bytes))
        } catch let DecodingError.dataCorrupted(ctx) {
            throw APIError(.badRequest, .invalidJSON, describe("invalid value", ctx))
        } catch let DecodingError.keyNotFound(key, ctx) {
            throw APIError(.badRequest, .invalidJSON, describe("missing field '\(key.stringValue)'", ctx))
        } catch let DecodingError.typeMismatch(_, ctx) {
            throw APIError(.badRequest, .invalidJSON, describe("wrong type", ctx))
        } catch let DecodingError.valueNotFound(_, ctx) {
            throw APIError(.badRequest, .invalidJSON, describe("null where a value is required", ctx))
        } catch {
            throw APIError(.badRequest, .invalidJSON, "request body is not valid JSON")
        }
    }

    private static func describe(_ what: String, _ ctx: DecodingError.Context) -> String {
        let path = ctx.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
        if ctx.codingPath.isEmpty && what == "invalid value" { return "request body is not valid JSON" }
        return "\(what) at \(path.isEmpty ? "top level" : String(path.drop { $0 == "." }))"
    }
}

/// JSON responses.
enum JSONResponse {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    static func make<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok) throws -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }

    static func raw(_ bytes: ByteBuffer, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: bytes))
    }
}

extension Parameters {
    /// A path parameter parsed as a UUID (400 when malformed).
    func uuid(_ name: String) throws -> UUID {
        guard let text = get(name), let id = UUID(uuidString: text) else { throw APIError.badRequest("'\(name)' in the path must be a UUID") }
        return id
    }
}
