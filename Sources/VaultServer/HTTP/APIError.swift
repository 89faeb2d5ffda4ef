import Foundation
import GRDB
import Hummingbird
import PostgresNIO
import VaultAPI

/// An error a client may see: a status, a stable code and a message meant for people. Every other
/// error becomes `internal` with a generic message; its text is only logged.
public struct APIError: HTTPResponseError, Sendable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    public var code: APIErrorCode
    public var message: String
    public var headers: HTTPFields = [:]

    public init(_ status: HTTPResponse.Status, _ code: APIErrorCode, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        // The same encoder as every other answer: sorted keys, slashes unescaped (openapi.yaml).
        let body = try VaultResponseEncoder.json.encode(APIErrorBody(code: code, message: message))
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    public var description: String { "\(status.code) \(code.rawValue): \(message)" }

    static func badRequest(_ m: String) -> APIError { APIError(.badRequest, .badRequest, m) }
    static func forbidden(_ m: String) -> APIError { APIError(.forbidden, .forbidden, m) }
    static func notFound(_ m: String) -> APIError { APIError(.notFound, .notFound, m) }
    static func conflict(_ m: String) -> APIError { APIError(.conflict, .conflict, m) }
    /// A push whose commitment of a tresor does not match the batch (Docs/commitment-pages.md §5).
    static func commitmentMismatch(_ tresor: UUID, category: String?) -> APIError {
        let name = category.map { " (\($0))" } ?? ""
        return APIError(
            .conflict,
            .commitmentMismatch,
            "the batch does not match its state commitment of tresor \(tresor.uuidString.lowercased())\(name): nothing stored"
        )
    }
    static let unauthorized = APIError(.unauthorized, .unauthorized, "a valid session token is required (Authorization: Bearer …)")
    static let `internal` = APIError(.internalServerError, .internalError, "internal server error")

    /// A storage outage: retry shortly (the server notices the database is back within about a second).
    static let unavailable: APIError = {
        var e = APIError(.serviceUnavailable, .unavailable, "storage is unavailable, retry later")
        e.headers[.retryAfter] = "2"
        return e
    }()
}

/// Turns every error into the JSON error shape: API errors pass through, Hummingbird's own HTTP errors
/// (unknown route, body too large) are mapped to codes, repository errors to 4xx where they mean one,
/// and anything else to a bare 500 whose detail stays in the server log.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Database failures a retry may cure: a busy or locked SQLite file, a PostgreSQL connection that
    /// failed or closed. Clients see 503 and retry; other database errors stay 500.
    static func isStorageOutage(_ error: any Error) -> Bool {
        if let e = error as? DatabaseError {
            return [.SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_IOERR, .SQLITE_CANTOPEN].contains(e.resultCode)
        }
        if let e = error as? PSQLError {
            // A client-side error without a report from the server: the connection failed or closed.
            guard let sqlState = e.serverInfo?[.sqlState] else { return true }
            // serialization failure, deadlock, too many connections, admin shutdown, crash shutdown,
            // cannot connect now
            return ["40001", "40P01", "53300", "57P01", "57P02", "57P03"].contains(sqlState)
        }
        // The pool's own errors (circuit breaker open, pool shut down) come from a module this package
        // does not import; they only ever mean that no connection could be had.
        return String(reflecting: type(of: error)).hasSuffix(".ConnectionPoolError")
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as HTTPError {
            let code: APIErrorCode
            switch error.status {
            case .notFound: code = .notFound
            case .contentTooLarge: code = .payloadTooLarge
            case .unsupportedMediaType: code = .unsupportedMediaType
            case .unauthorized: code = .unauthorized
            case .forbidden: code = .forbidden
            case .methodNotAllowed: code = .badRequest
            case .badRequest: code = .badRequest
            default: code = error.status.code >= 500 ? .internalError : .badRequest
            }
            let message = error.status.code >= 500 ? "internal server error" : (error.body ?? error.status.reasonPhrase).lowercased()
            var api = APIError(error.status, code, message)
            api.headers = error.headers
            api.headers[.contentType] = nil
            throw api
        } catch let error as RepositoryError {
            switch error {
            case let .conflict(m): throw APIError.conflict(m)
            case let .notFound(m): throw APIError.notFound("\(m) not found")
            case let .invalidTransition(from, to): throw APIError(.conflict, .conflict, "cannot move from \(from) to \(to)")
            case let .commitmentMismatch(t): throw APIError.commitmentMismatch(t, category: nil)
            case .unavailable:
                context.logger.error("database unavailable", metadata: ["error": "\(error)"])
                throw APIError.unavailable
            }
        } catch  where Self.isStorageOutage(error) {
            context.logger.error("storage unavailable", metadata: ["error": "\(String(reflecting: type(of: error)))"])
            throw APIError.unavailable
        } catch {
            context.logger.error("unhandled error", metadata: ["error": "\(String(reflecting: type(of: error)))", "detail": "\(error)"])
            throw APIError.internal
        }
    }
}
