import Foundation
import Synchronization
import VaultAPI
import VaultCore
import VaultCrypto

/// The trust anchor's side of the service (Docs/design.md §2, §3): what is pending, approving and
/// rejecting it, the accounts and the audit log. The private key stays in this process: every
/// certificate and approval is signed here, and every request carries an admin request signature
/// (`AdminRequestSignature`, made by `Transport` for `.admin` authentication, anew on each attempt).
public struct AdminClient: Sendable {
    /// The server connection the admin requests go through.
    public let transport: Transport
    /// The public key clients pin: certificates are checked against it before an approval is signed.
    public let pinnedKey: SigningPublicKey
    /// The admin's record of issued certificates; with one, a second certificate for a known name or id
    /// is refused before it is signed (`CertificateLedger`).
    public let ledger: CertificateLedger?
    /// The admin's record of decided share requests; with one, a request decided before is never approved
    /// again under another share id (`ShareDecisionLedger`).
    public let decisions: ShareDecisionLedger?
    let key: SigningKeyPair
    private let deployment = DeploymentIDCache()

    /// An admin client over `transport`, signing with `key`. The key must be the one clients pin,
    /// or every certificate it issued would be refused by them.
    public init(
        transport: Transport,
        key: SigningKeyPair,
        pinnedKey: SigningPublicKey,
        ledger: CertificateLedger? = nil,
        decisions: ShareDecisionLedger? = nil
    ) throws {
        guard key.publicKey == pinnedKey else {
            throw ClientError.localState("the admin private key does not belong to the pinned admin public key")
        }
        self.transport = transport
        self.key = key
        self.pinnedKey = pinnedKey
        self.ledger = ledger
        self.decisions = decisions
    }

    /// An admin client to `baseURL`, pinning the public half of `key`.
    public init(
        baseURL: String,
        key: SigningKeyPair,
        ledger: CertificateLedger? = nil,
        decisions: ShareDecisionLedger? = nil,
        maxAttempts: Int = 4,
        baseDelayMs: UInt64 = 200
    ) throws {
        let transport = try Transport(baseURL: baseURL, maxAttempts: maxAttempts, baseDelayMs: baseDelayMs)
        try self.init(transport: transport, key: key, pinnedKey: key.publicKey, ledger: ledger, decisions: decisions)
    }

    /// The admin signature for this server's deployment, whose id is asked once (Docs/envelope-v1.md §3.5).
    var auth: Transport.Auth {
        get async throws { .admin(key, deploymentID: try await deploymentID()) }
    }

    /// The id the server publishes at `GET /v1/deployment`, checked for its form (16 bytes, base64url).
    public func deploymentID() async throws -> String {
        if let known = deployment.value.withLock({ $0 }) { return known }
        let answer = try await transport.send(AdminEndpoints.deployment)
        guard answer.deploymentID.count == 22, (try? Base64URL.decode(answer.deploymentID))?.count == 16 else {
            throw ClientError.integrity("the server's deployment id is not 16 bytes of base64url")
        }
        deployment.value.withLock { $0 = answer.deploymentID }
        return answer.deploymentID
    }

    /// Every registration and share waiting for a decision, read page by page (`pageSize` of each list
    /// a page), each list oldest first, and the next free approval sequence number: the highest any page offered.
    public func pending(pageSize: Int = APILimits.defaultListLimit) async throws -> PendingResponse {
        var all = PendingResponse(registrations: [], shares: [], nextSequence: 0)
        var cursor: UUID?
        var shareCursor: UUID?
        var pages = 0
        while true {
            let page = try await pendingPage(after: cursor, sharesAfter: shareCursor, limit: pageSize)
            all.registrations += page.registrations
            all.shares += page.shares
            all.nextSequence = max(all.nextSequence, page.nextSequence)
            pages += 1
            try ListingPages.requireBounded(pages: pages, items: all.registrations.count + all.shares.count)
            if page.done {
                // A registration or share listed on two pages is reviewed once.
                var seenUsers = Set<UUID>()
                var seenShares = Set<UUID>()
                all.registrations = all.registrations.filter { seenUsers.insert($0.request.userID).inserted }
                all.shares = all.shares.filter { seenShares.insert($0.share.shareID).inserted }
                all.registrations.sort { ($0.receivedAt, $0.request.username) < ($1.receivedAt, $1.request.username) }
                all.shares.sort { ($0.share.createdAt, $0.share.shareID.uuidString) < ($1.share.createdAt, $1.share.shareID.uuidString) }
                return all
            }
            // A page that is not the last moves a cursor forward (an empty one too: the server passed over
            // rows it does not show); neither may go back.
            let next = (page.nextCursor ?? cursor, page.nextShareCursor ?? shareCursor)
            let (old, new) = ((ListingPages.key(cursor), ListingPages.key(shareCursor)), (ListingPages.key(next.0), ListingPages.key(next.1)))
            let forward = { (a: String?, b: String?) in b.map { b in a.map { b > $0 } ?? true } ?? false }
            let back = { (a: String?, b: String?) in a.map { a in b.map { $0 < a } ?? true } ?? false }
            guard forward(old.0, new.0) || forward(old.1, new.1), !back(old.0, new.0), !back(old.1, new.1) else {
                throw ClientError.integrity("the server's pages do not advance (a page that is not the last repeats its cursors)")
            }
            (cursor, shareCursor) = next
        }
    }

    /// One page of what waits: up to `limit` registrations after user id `after` and up to `limit` shares
    /// after share id `sharesAfter`.
    public func pendingPage(after: UUID? = nil, sharesAfter: UUID? = nil, limit: Int = APILimits.defaultListLimit) async throws -> PendingResponse {
        var query = ListingPages.query(after: ListingPages.key(after), limit: limit)
        if let sharesAfter = ListingPages.key(sharesAfter) { query += "&sharesAfter=\(sharesAfter)" }
        return try await transport.send(AdminEndpoints.pending.query(query), auth: auth)
    }

    /// Rejects the pending registration (by user id or username) or share (by id) that `id` names, with
    /// a reason the user sees. `pending` is the list to look in; without it the server is asked.
    public func reject(id: String, reason: String, pending: PendingResponse? = nil) async throws {
        let list: PendingResponse
        if let pending { list = pending } else { list = try await self.pending() }
        guard let item = list.items.first(where: { $0.isNamed(by: id) }) else {
            throw ClientError.notFound("nothing pending with id or username '\(id)'")
        }
        let body = RejectRequest(reason: reason)
        switch item {
        case let .registration(r):
            _ = try await transport.send(AdminEndpoints.rejectRegistration(r.request.userID.uuidString), body, auth: auth)
        case let .share(s):
            try await decisions?.admit(s.share.grant, shareID: s.share.shareID, decision: .rejected, at: Date().unixMillis)
            _ = try await transport.send(AdminEndpoints.rejectShare(s.share.shareID.uuidString), body, auth: auth)
        }
    }

    /// Every account, whatever its state, read page by page (`pageSize` a page), oldest first.
    public func users(pageSize: Int = APILimits.maxListLimit) async throws -> UserList {
        let users = try await ListingPages.all(
            fetch: { try await usersPage(after: $0.flatMap(UUID.init(uuidString:)), limit: pageSize) },
            items: \.users,
            next: { ListingPages.key($0.nextCursor) },
            done: \.done
        )
        return UserList(users: users.sorted { ($0.createdAt, $0.username) < ($1.createdAt, $1.username) })
    }

    /// One page of the accounts: up to `limit` with a user id above `after`, by id.
    public func usersPage(after: UUID? = nil, limit: Int = APILimits.maxListLimit) async throws -> UserList {
        try await transport.send(AdminEndpoints.users.query(ListingPages.query(after: ListingPages.key(after), limit: limit)), auth: auth)
    }

    /// Up to `limit` audit entries after entry `after`.
    public func auditLog(after: UInt64 = 0, limit: Int = 200) async throws -> AuditPage {
        try await transport.send(AdminEndpoints.audit.query("after=\(after)&limit=\(limit)"), auth: auth)
    }

    /// The server's check of the whole hash chain of the audit log.
    public func verifyAudit() async throws -> AuditVerification {
        try await transport.send(AdminEndpoints.auditVerify, auth: auth)
    }
}

/// A server's deployment id once it is known.
final class DeploymentIDCache: Sendable {
    let value = Mutex<String?>(nil)
}
