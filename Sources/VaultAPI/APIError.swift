/// The stable error codes of the API. Clients map them, not message texts, to behaviour.
public enum APIErrorCode: String, Codable, Sendable, CaseIterable {
    case badRequest = "bad_request"
    case invalidJSON = "invalid_json"
    case unsupportedMediaType = "unsupported_media_type"
    case payloadTooLarge = "payload_too_large"
    case unauthorized = "unauthorized"
    case invalidCredentials = "invalid_credentials"
    case pendingApproval = "pending_approval"
    case accountRejected = "account_rejected"
    case forbidden = "forbidden"
    case notFound = "not_found"
    case conflict = "conflict"
    case invalidSignature = "invalid_signature"
    /// A push batch does not match its own state commitment of a tresor; nothing of it was stored
    /// (Docs/commitment-pages.md §5).
    case commitmentMismatch = "commitment_mismatch"
    case invalidApproval = "invalid_approval"
    case shareNotActive = "share_not_active"
    case clockSkew = "clock_skew"
    case rateLimited = "rate_limited"
    case unavailable = "unavailable"
    /// The client is older than the server serves (426): only upgrading the client helps (Docs/design.md §8).
    case upgradeRequired = "upgrade_required"
    /// An `Idempotency-Key` sent again with another method, route or body (409; Docs/design.md §6.2).
    case idempotencyKeyReused = "idempotency_key_reused"
    /// A request with this `Idempotency-Key` is still running (409 with `Retry-After`): the same request,
    /// sent again shortly, gets its answer.
    case requestInProgress = "request_in_progress"
    case internalError = "internal"
}

/// The body of every error response: `{"error": {"code": …, "message": …}}`.
public struct APIErrorBody: Codable, Sendable, Equatable {
    public struct Detail: Codable, Sendable, Equatable {
        public var code: APIErrorCode
        public var message: String
        public init(code: APIErrorCode, message: String) {
            self.code = code
            self.message = message
        }
    }

    public var error: Detail

    public init(code: APIErrorCode, message: String) { error = Detail(code: code, message: message) }
}
