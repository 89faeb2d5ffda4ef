import Foundation
import Hummingbird
import Logging
import VaultAPI
import VaultCore
import VaultCrypto

/// The authenticated caller of a request.
struct Caller: Sendable {
    let user: UserRow
    let tokenHash: String
    var id: UUID { user.id }
    var certificate: Certificate { user.certificate! }
}

/// The server's behaviour, independent of routing: every rule of Docs/design.md §2, §3, §5 and §6 lives here,
/// and the router only maps requests to these methods.
struct VaultService: Sendable {
    let repository: any VaultRepository
    let adminKey: SigningPublicKey
    let clock: @Sendable () -> UnixMillis
    let rateLimiter: LoginRateLimiter

    init(repository: any VaultRepository, adminKey: SigningPublicKey, clock: @escaping @Sendable () -> UnixMillis,
         rateLimits: LoginRateLimiter.Limits = .init()) {
        self.repository = repository
        self.adminKey = adminKey
        self.clock = clock
        self.rateLimiter = LoginRateLimiter(limits: rateLimits)
    }

    static func idText(_ id: UUID) -> String { id.uuidString.lowercased() }

    // MARK: Sessions

    static func tokenHash(_ token: String) -> String { Hex.encode(try! BLAKE2b.hash(Array(("CareVault-session-v1:" + token).utf8))) }

    /// The caller of a request with a valid bearer token, or 401.
    func authenticate(_ request: Request) async throws -> Caller {
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer ") else { throw APIError.unauthorized }
        let token = String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        guard !token.isEmpty, token.count <= 128 else { throw APIError.unauthorized }
        let hash = Self.tokenHash(token)
        guard let session = try await repository.session(tokenHash: hash), session.expiresAt > clock() else {
            throw APIError(.unauthorized, .unauthorized, "session expired or logged out; log in again")
        }
        guard let user = try await repository.user(id: session.userID), user.status == .active, user.certificate != nil else {
            throw APIError(.forbidden, .forbidden, "account is not active")
        }
        return Caller(user: user, tokenHash: hash)
    }

    func require(_ caller: Caller, role: Role) throws {
        guard caller.user.role == role else { throw APIError.forbidden("only a \(role.rawValue) may do this") }
    }

    // MARK: Accounts

    func register(_ r: RegistrationRequest) async throws -> (RegisterResponse, HTTPResponse.Status) {
        do { try r.verify() } catch {
            switch error {
            case .invalidSignature: throw APIError(.badRequest, .invalidSignature, "registration self-signature is not valid")
            default: throw APIError.badRequest("registration rejected: \(error.description)")
            }
        }
        let now = clock()
        let row = UserRow(id: r.userID, username: r.username, role: r.role, status: .pending, registration: r, certificate: nil,
                          approval: nil, rejectReason: nil, createdAt: now, updatedAt: now)
        do {
            try await repository.insertUser(row, audit: AuditEvent(actor: Self.idText(r.userID), action: "account.registered",
                                                                   patientID: r.role == .patient ? r.userID : nil,
                                                                   details: ["username": r.username, "role": r.role.rawValue]))
            return (RegisterResponse(userID: r.userID, status: .pending), .accepted)
        } catch RepositoryError.conflict {
            // Repeating the same registration is idempotent; anything else under that name or id is a conflict.
            if let existing = try await repository.user(username: r.username), existing.registration == r {
                return (RegisterResponse(userID: existing.id, status: existing.status), .ok)
            }
            throw APIError.conflict("username '\(r.username)' (or this user id) is already registered")
        }
    }

    /// The KDF parameters of a username; stable fakes for unknown names, so they cannot be enumerated.
    func loginParameters(username raw: String) async throws -> LoginParametersResponse {
        let name = Username.lookupKey(raw)
        if let user = try await repository.user(username: name) {
            return LoginParametersResponse(kdf: user.registration.kdf, salt: user.registration.salt)
        }
        let secret = try await repository.serverSecret()
        let fake = try BLAKE2b.hash(Array(("fake-salt:" + name).utf8), key: SecureBytes(copying: secret), outputLength: 16)
        return LoginParametersResponse(kdf: .moderate, salt: try Salt(bytes: fake))
    }

    func login(_ r: LoginRequest, address: String) async throws -> LoginResponse {
        let name = Username.lookupKey(r.username)
        let now = clock()
        if let wait = rateLimiter.retryAfter(username: name, address: address, now: now) {
            var e = APIError(.tooManyRequests, .rateLimited, "too many failed logins; retry in \(wait / 1000 + 1) seconds")
            e.headers[.retryAfter] = String(wait / 1000 + 1)
            throw e
        }
        guard let presented = (try? Base64URL.decode(r.loginKey)).flatMap({ $0.count == 32 ? $0 : nil }) else {
            throw APIError.badRequest("loginKey must be 32 bytes of base64url")
        }
        let user = try await repository.user(username: name)
        let expected = user.flatMap { try? Base64URL.decode($0.registration.loginVerifier) } ?? [UInt8](repeating: 0, count: 32)
        // Always hash, so an unknown username costs the same as a wrong password.
        let verifier = PasswordKeys.verifier(for: try SymmetricKey(bytes: presented))
        guard let user, ConstantTime.equals(verifier, expected) else {
            rateLimiter.recordFailure(username: name, address: address, now: now)
            try await repository.appendAudit([AuditEvent(actor: user.map { Self.idText($0.id) } ?? "unknown", action: "login.failed",
                                                         patientID: user?.role == .patient ? user?.id : nil,
                                                         details: ["username": name, "address": address])], now: now)
            throw APIError(.unauthorized, .invalidCredentials, "wrong username or password")
        }
        rateLimiter.recordSuccess(username: name)
        switch user.status {
        case .pending: throw APIError(.forbidden, .pendingApproval, "account '\(name)' is waiting for admin approval")
        case .rejected: throw APIError(.forbidden, .accountRejected, "account '\(name)' was rejected: \(user.rejectReason ?? "no reason given")")
        case .active: break
        }
        guard let certificate = user.certificate else { throw APIError.internalError }
        let token = Base64URL.encode(RandomBytes.bytes(count: 32))
        let expires = now + APILimits.sessionLifetimeMs
        try await repository.insertSession(SessionRow(tokenHash: Self.tokenHash(token), userID: user.id, createdAt: now, expiresAt: expires))
        try await repository.appendAudit([AuditEvent(actor: Self.idText(user.id), action: "login", patientID: user.role == .patient ? user.id : nil,
                                                     details: ["address": address])], now: now)
        return LoginResponse(token: token, expiresAt: expires, userID: user.id, role: user.role, keyBundle: user.registration.keyBundle,
                             certificate: certificate)
    }

    func logout(_ caller: Caller) async throws {
        try await repository.deleteSession(tokenHash: caller.tokenHash)
    }

    func directory(username: String? = nil, id: UUID? = nil) async throws -> DirectoryEntry {
        var user: UserRow?
        if let username { user = try await repository.user(username: Username.lookupKey(username)) }
        if let id { user = try await repository.user(id: id) }
        guard let user, user.status == .active, let cert = user.certificate else { throw APIError.notFound("no approved user \(username.map { "named '\($0)'" } ?? "with that id")") }
        return DirectoryEntry(certificate: cert)
    }

    // MARK: Tresors

    func putTresor(_ caller: Caller, _ r: PutTresorRequest) async throws -> TresorInfo {
        try require(caller, role: .patient)
        let g = r.selfGrant
        guard g.patientID == caller.id, g.memberID == caller.id else { throw APIError.forbidden("a self-grant names the caller as patient and member") }
        try validateCategory(g.category)
        do { try g.verify(patient: caller.certificate, adminKey: adminKey) } catch {
            throw APIError(.badRequest, .invalidSignature, "self-grant does not verify: \(error)")
        }
        guard g.hasContiguousEpochs, let top = g.epochs.last else {
            throw APIError.badRequest("a self-grant carries every epoch from 1 to the newest")
        }
        let row = TresorRow(id: g.tresorID, ownerID: caller.id, category: g.category, currentEpoch: top, selfGrant: g, updatedAt: clock())
        let saved = try await repository.upsertTresor(row, audit: AuditEvent(actor: Self.idText(caller.id), action: "tresor.epoch", patientID: caller.id,
                                                                             details: ["category": g.category, "epoch": String(top)]))
        return info(saved)
    }

    func tresors(_ caller: Caller) async throws -> TresorList {
        try require(caller, role: .patient)
        return TresorList(tresors: try await repository.tresors(ownerID: caller.id).map(info))
    }

    func info(_ t: TresorRow) -> TresorInfo {
        TresorInfo(tresorID: t.id, ownerID: t.ownerID, category: t.category, currentEpoch: t.currentEpoch, selfGrant: t.selfGrant, updatedAt: t.updatedAt)
    }

    func validateCategory(_ c: String) throws {
        do { try Activity.validateCategory(c) } catch {
            throw APIError.badRequest("category must be 1-64 characters of a-z, 0-9 and '-'")
        }
    }

    // MARK: Shares

    func shareInfo(_ s: ShareRow) async throws -> ShareInfo {
        let patient = try await repository.user(id: s.patientID), doctor = try await repository.user(id: s.doctorID)
        return ShareInfo(shareID: s.id, patientID: s.patientID, patientUsername: patient?.username ?? "?", doctorID: s.doctorID,
                         doctorUsername: doctor?.username ?? "?", tresorID: s.tresorID, category: s.category, state: s.state, grant: s.grant,
                         approval: s.approval, latestGrant: s.latestGrant, reason: s.reason, createdAt: s.createdAt, updatedAt: s.updatedAt,
                         expiresAt: s.expiresAt)
    }

    func createShare(_ caller: Caller, _ r: CreateShareRequest) async throws -> ShareInfo {
        try require(caller, role: .patient)
        let g = r.grant
        guard g.patientID == caller.id else { throw APIError.forbidden("a patient can only share their own data") }
        do { try g.verify(patient: caller.certificate, adminKey: adminKey) } catch {
            throw APIError(.badRequest, .invalidSignature, "grant does not verify: \(error)")
        }
        guard let doctor = try await repository.user(id: g.memberID), doctor.status == .active, doctor.role == .doctor else {
            throw APIError.badRequest("the grant's member is not an approved doctor")
        }
        guard let tresor = try await repository.tresor(id: g.tresorID), tresor.ownerID == caller.id, tresor.category == g.category else {
            throw APIError.badRequest("unknown tresor: declare the category's tresor first (PUT /v1/tresors)")
        }
        guard !g.epochs.isEmpty, g.epochs.count <= Int(tresor.currentEpoch), g.epochsExist(upTo: tresor.currentEpoch) else {
            throw APIError.badRequest("the grant names epochs the tresor does not have")
        }
        let now = clock()
        if let e = g.expiresAt, e <= now { throw APIError.badRequest("the share's expiry date has already passed") }
        let row = ShareRow(id: UUID(), patientID: caller.id, doctorID: doctor.id, tresorID: tresor.id, category: tresor.category, state: .pending,
                           grant: g, approval: nil, reason: nil, createdAt: now, updatedAt: now, expiresAt: g.expiresAt)
        try await repository.insertShare(row, audit: AuditEvent(actor: Self.idText(caller.id), action: "share.requested", patientID: caller.id,
                                                                details: ["share": Self.idText(row.id), "doctor": doctor.username, "category": row.category]))
        return try await shareInfo(row)
    }

    func shares(_ caller: Caller) async throws -> ShareList {
        _ = try await repository.expireShares(now: clock())
        // A doctor sees active shares only: a pending or rejected share's grant carries sealed keys the
        // admin has not (or not yet) approved.
        let rows = caller.user.role == .patient ? try await repository.shares(patientID: caller.id)
                                                 : try await repository.shares(doctorID: caller.id).filter { $0.state == .active }
        var out: [ShareInfo] = []
        for r in rows { out.append(try await shareInfo(r)) }
        return ShareList(shares: out)
    }

    func ownedShare(_ caller: Caller, _ id: UUID) async throws -> ShareRow {
        try require(caller, role: .patient)
        guard let s = try await repository.share(id: id), s.patientID == caller.id else { throw APIError.notFound("no such share") }
        return s
    }

    func revokeShare(_ caller: Caller, _ id: UUID) async throws -> ShareInfo {
        let s = try await ownedShare(caller, id)
        let row = try await repository.transitionShare(id: s.id, from: [.pending, .active], to: .revoked, approval: nil, reason: "revoked by the patient",
                                                       now: clock(), audit: AuditEvent(actor: Self.idText(caller.id), action: "share.revoked", patientID: caller.id,
                                                                                       details: ["share": Self.idText(s.id), "category": s.category]))
        return try await shareInfo(row)
    }

    func updateShareGrant(_ caller: Caller, _ id: UUID, _ r: UpdateShareGrantRequest) async throws -> ShareInfo {
        _ = try await repository.expireShares(now: clock())
        let s = try await ownedShare(caller, id)
        let g = r.grant
        guard g.patientID == s.patientID, g.memberID == s.doctorID, g.tresorID == s.tresorID, g.category == s.category else {
            throw APIError.badRequest("a new grant must name the same patient, doctor and tresor")
        }
        guard g.expiresAt == s.grant.expiresAt else {
            throw APIError.badRequest("a new grant keeps the approved expiry date; share again to change it")
        }
        do { try g.verify(patient: caller.certificate, adminKey: adminKey) } catch {
            throw APIError(.badRequest, .invalidSignature, "grant does not verify: \(error)")
        }
        guard let tresor = try await repository.tresor(id: s.tresorID), g.epochsExist(upTo: tresor.currentEpoch),
              g.isSuccessor(of: s.latestGrant ?? s.grant)
        else { throw APIError.badRequest("a new grant keeps the old epochs and adds only epochs the tresor has") }
        let row = try await repository.updateShareGrant(id: s.id, grant: g, now: clock(), audit: AuditEvent(
            actor: Self.idText(caller.id), action: "share.epochs", patientID: caller.id,
            details: ["share": Self.idText(s.id), "epochs": g.epochs.map(String.init).joined(separator: ",")]))
        return try await shareInfo(row)
    }

    func patients(_ caller: Caller) async throws -> PatientList {
        try require(caller, role: .doctor)
        _ = try await repository.expireShares(now: clock())
        let active = try await repository.shares(doctorID: caller.id).filter { $0.state == .active }
        var byPatient: [UUID: PatientSummary] = [:]
        for s in active {
            let last = try await repository.lastChange(ownerID: s.patientID, tresorID: s.tresorID) ?? s.updatedAt
            if var p = byPatient[s.patientID] {
                p.categories = Array(Set(p.categories + [s.category])).sorted()
                p.lastChange = max(p.lastChange, last)
                byPatient[s.patientID] = p
            } else {
                let name = try await repository.user(id: s.patientID)?.username ?? "?"
                byPatient[s.patientID] = PatientSummary(patientID: s.patientID, username: name, categories: [s.category], lastChange: last)
            }
        }
        return PatientList(patients: byPatient.values.sorted { $0.username < $1.username })
    }

    // MARK: Records

    func push(_ caller: Caller, _ r: PushRequest) async throws -> PushResponse {
        try require(caller, role: .patient)
        guard r.envelopes.count <= APILimits.maxPushBatch else {
            throw APIError(.contentTooLarge, .payloadTooLarge, "at most \(APILimits.maxPushBatch) envelopes per push")
        }
        let tresors = Dictionary(uniqueKeysWithValues: try await repository.tresors(ownerID: caller.id).map { ($0.id, $0) })
        let now = clock()
        let signingKey = caller.certificate.signingKey
        let me = caller.id

        // Checks that need no database, including the Ed25519 verification, spread over every core.
        let envelopes = r.envelopes
        let checked: [Result<VersionRow, APIError>] = try await Parallel.map(envelopes) { envelope in
            Self.check(envelope, owner: me, signingKey: signingKey, tresors: tresors, now: now)
        }
        var rows: [VersionRow] = []
        var results: [PushResult] = []
        var accepted: [Int] = []
        for (i, result) in checked.enumerated() {
            switch result {
            case let .success(row):
                accepted.append(i)
                rows.append(row)
                results.append(PushResult(versionID: row.versionID, status: .stored))
            case let .failure(err):
                results.append(PushResult(versionID: envelopes[i].versionID, status: .rejected, code: err.code, reason: err.message))
            }
        }
        let outcomes = try await repository.storeVersions(ownerID: me, rows)
        for (k, outcome) in zip(accepted, outcomes) {
            switch outcome {
            case let .stored(seq): results[k].sequence = seq
            case .duplicate: results[k].status = .duplicate
            }
        }
        return PushResponse(results: results)
    }

    /// Every server-side check of one envelope (Docs/design.md §4, §5; Docs/envelope-v1.md §4.4 steps 1-3).
    static func check(_ e: Envelope, owner: UUID, signingKey: SigningPublicKey, tresors: [UUID: TresorRow], now: UnixMillis) -> Result<VersionRow, APIError> {
        do {
            try e.header.validateStructure()
        } catch {
            return .failure(APIError.badRequest("\(error)"))
        }
        guard e.header.ownerID == owner else { return .failure(.forbidden("envelope names another owner")) }
        guard e.ciphertext.count <= APILimits.maxCiphertextBytes else {
            return .failure(APIError(.contentTooLarge, .payloadTooLarge, "ciphertext larger than \(APILimits.maxCiphertextBytes) bytes"))
        }
        guard let t = tresors[e.header.tresorID], t.category == e.header.category else {
            return .failure(.badRequest("unknown tresor or category: declare it first"))
        }
        guard e.header.epoch <= t.currentEpoch else { return .failure(.badRequest("tresor epoch \(e.header.epoch) is not declared")) }
        let limit = UInt64(max(0, now)) + APILimits.maxForwardDriftMs
        guard e.header.timestamp.physicalMs <= limit else {
            return .failure(APIError(.badRequest, .clockSkew, "HLC time is more than \(APILimits.maxForwardDriftMs / 3_600_000) hours ahead of the server; check the device clock"))
        }
        let ad = e.header.associatedData()
        guard signingKey.isValidSignature(e.signature, for: Envelope.signedBytes(associatedData: ad, nonce: e.nonce, ciphertext: e.ciphertext)) else {
            return .failure(APIError(.badRequest, .invalidSignature, "envelope signature does not verify under the owner's certified key"))
        }
        guard let json = try? JSONResponse.encoder.encode(e) else { return .failure(.badRequest("envelope cannot be encoded")) }
        let ts = e.header.timestamp
        return .success(VersionRow(versionID: e.versionID(associatedData: ad), ownerID: owner, recordID: e.header.recordID.hex, tresorID: t.id, epoch: e.header.epoch,
                                   hlcPhysical: Int64(clamping: ts.physicalMs), hlcCounter: Int64(ts.counter), hlcDevice: ts.deviceID,
                                   deleted: e.header.deleted, envelopeJSON: Array(json)))
    }

    /// A page of changes. The owner reads all of theirs; a doctor reads one tresor through an active share.
    func pull(_ caller: Caller, owner: UUID?, tresor: UUID?, since: UInt64, limit: Int) async throws -> (PullPage) {
        let owner = owner ?? caller.id
        let clamped = max(1, min(limit, APILimits.maxPullLimit))
        if owner == caller.id {
            guard caller.user.role == .patient else { throw APIError.badRequest("a doctor names the patient and category: ?owner=ID&tresor=ID") }
            return PullPage(rows: try await repository.changes(ownerID: owner, tresorID: tresor, since: since, limit: clamped), limit: clamped, since: since)
        }
        try require(caller, role: .doctor)
        guard let tresor else { throw APIError.badRequest("a doctor pulls one tresor: add ?tresor=ID") }
        let now = clock()
        _ = try await repository.expireShares(now: now)
        let mine = try await repository.shares(doctorID: caller.id).filter { $0.patientID == owner && $0.tresorID == tresor }
        guard mine.contains(where: { $0.state == .active }) else {
            if let s = mine.last {
                throw APIError(.forbidden, .shareNotActive, "the share of \(s.category) is \(s.state.rawValue); access is not permitted")
            }
            throw APIError.forbidden("no share of this patient's data with you")
        }
        let rows = try await repository.changes(ownerID: owner, tresorID: tresor, since: since, limit: clamped)
        let category = mine.first?.category ?? "?"
        try await repository.appendAudit([AuditEvent(actor: Self.idText(caller.id), action: "records.read", patientID: owner,
                                                     details: ["doctor": caller.user.username, "category": category, "since": String(since),
                                                               "count": String(rows.count)])], now: now)
        return PullPage(rows: rows, limit: clamped, since: since)
    }

    func accessLog(_ caller: Caller, after: UInt64, limit: Int) async throws -> AuditPage {
        try require(caller, role: .patient)
        let clamped = max(1, min(limit, 1_000))
        let entries = try await repository.auditEntries(after: after, limit: clamped, patientID: caller.id)
        return AuditPage(entries: entries, nextCursor: entries.last?.sequence ?? after, done: entries.count < clamped)
    }
}

/// A page of changes, serialised without decoding the stored envelopes again.
struct PullPage {
    let rows: [ChangeRow]
    let limit: Int
    let since: UInt64

    var nextCursor: UInt64 { rows.last?.sequence ?? since }
    var done: Bool { rows.count < limit }

    func body() -> ByteBuffer {
        var b = ByteBuffer()
        b.reserveCapacity(rows.reduce(64) { $0 + $1.envelopeJSON.count + 40 })
        b.writeString("{\"changes\":[")
        for (i, r) in rows.enumerated() {
            if i > 0 { b.writeString(",") }
            b.writeString("{\"sequence\":\(r.sequence),\"envelope\":")
            b.writeBytes(r.envelopeJSON)
            b.writeString("}")
        }
        b.writeString("],\"done\":\(done),\"nextCursor\":\(nextCursor)}")
        return b
    }
}
