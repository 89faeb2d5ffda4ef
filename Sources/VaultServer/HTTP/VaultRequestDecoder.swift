import Foundation
import Hummingbird
import VaultAPI

/// The request decoder of `VaultRequestContext`, with errors that name the problem: wrong content type
/// (415), too large (413), malformed JSON or wrong types (400).
public struct VaultRequestDecoder: RequestDecoder {
    /// Creates the decoder; it has no state of its own.
    public init() {}

    /// Reads the whole body (refusing more than the limit) and decodes it as JSON.
    public func decode<T: Decodable>(_ type: T.Type, from request: Request, context: some RequestContext) async throws -> T {
        try await Self.decode(T.self, from: request, limit: APILimits.maxBodyBytes)
    }

    /// Decodes a JSON body of at most `limit` bytes (413 beyond).
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, limit: Int) async throws -> T {
        guard request.hasJSONBody else {
            throw APIError(.unsupportedMediaType, .unsupportedMediaType, "request body must be application/json")
        }
        var request = request
        return try JSONBody.decode(T.self, from: try await request.bodyBytes(upTo: limit))
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
