import Foundation
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// The server's behaviour, independent of routing: every rule of Docs/design.md §2, §3, §5 and §6 lives
/// here (one extension per area), and the controllers only map requests to these methods. This file
/// holds what the areas share: the dependencies, identifiers, role and signature checks, audit pages.
struct VaultService: Sendable {
    let repository: any VaultRepository
    let adminKey: SigningPublicKey
    let clock: @Sendable () -> UnixMillis
    let rateLimiter: LoginRateLimiter
    let registrationLimiter: RegistrationRateLimiter
    /// Keeps `touch` to one write a minute per session.
    let sessionTouches = SessionTouchLog()
    /// Live events, published after committed changes (Docs/events.md).
    let events: EventHub
    /// The standalone audit appends, written in batches (Docs/design.md §6).
    let auditBatcher: AuditBatcher

    init(
        repository: any VaultRepository,
        adminKey: SigningPublicKey,
        clock: @escaping @Sendable () -> UnixMillis,
        rateLimits: LoginRateLimiter.Limits = .init(),
        registrationLimits: RegistrationRateLimiter.Limits = .init(),
        events: EventHub = EventHub(),
        auditBatcher: AuditBatcher? = nil
    ) {
        self.repository = repository
        self.auditBatcher = auditBatcher ?? AuditBatcher(repository: repository)
        self.adminKey = adminKey
        self.clock = clock
        self.events = events
        self.rateLimiter = LoginRateLimiter(repository: repository, limits: rateLimits)
        self.registrationLimiter = RegistrationRateLimiter(limits: registrationLimits)
    }

    /// A 429 telling the client to wait `waitMs` milliseconds (rounded up to whole seconds).
    static func tooManyRequests(_ what: String, waitMs: Int64) -> APIError {
        let seconds = String(max(1, (waitMs + 999) / 1000))
        var e = APIError(.tooManyRequests, .rateLimited, "\(what); retry in \(seconds) seconds")
        e.headers[.retryAfter] = seconds
        return e
    }

    static func idText(_ id: UUID) -> String { id.uuidString.lowercased() }

    /// Sessions are stored by hash only, so a copy of the database holds no usable token.
    static func tokenHash(_ token: String) -> String { Hex.encode(try! BLAKE2b.hash(Array(("CareVault-session-v1:" + token).utf8))) }

    func require(_ caller: Caller, role: Role) throws {
        guard caller.user.role == role else { throw APIError.forbidden("only a \(role.rawValue) may do this") }
    }

    /// A grant the caller signed, checked against their certificate and the admin key (Docs/design.md §3);
    /// `what` names it in the 400.
    func verify(_ grant: Grant, by caller: Caller, what: String) throws {
        do { try grant.verify(patient: caller.certificate, adminKey: adminKey) } catch {
            throw APIError(.badRequest, .invalidSignature, "\(what) does not verify: \(error)")
        }
    }

    /// An audit entry of a patient acting on their own data.
    static func patientEvent(_ caller: Caller, _ action: String, _ details: [String: String]) -> AuditEvent {
        AuditEvent(actor: idText(caller.id), action: action, patientID: caller.id, details: details)
    }

    /// An audit entry of the admin's, listed in the access log of `patientID` when there is one.
    static func adminEvent(_ action: String, patientID: UUID?, _ details: [String: String]) -> AuditEvent {
        AuditEvent(actor: "admin", action: action, patientID: patientID, details: details)
    }

    /// A page of the audit log after `after`, of one patient's entries or of all.
    func auditPage(after: UInt64, limit: Int, patientID: UUID?) async throws -> AuditPage {
        let clamped = max(1, min(limit, 1_000))
        let entries = try await repository.auditEntries(after: after, limit: clamped, patientID: patientID)
        return AuditPage(entries: entries, nextCursor: entries.last?.sequence ?? after, done: entries.count < clamped)
    }
}
