import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// The real router over a fresh repository, with an admin key, a movable clock and helpers that speak
/// the API as the clients do.
struct APIHarness: Sendable {
    let repository: any VaultRepository
    let admin = SigningKeyPair.generate()
    let clock = TestClock()

    /// Runs `body` against the router of a fresh database of `backend`.
    static func run(
        _ backend: Backend,
        registrationsPerHour: Int = 20,
        _ body: @escaping @Sendable (APIClient) async throws -> Void
    ) async throws {
        try await TestDatabase.with(backend) { repo in
            let h = APIHarness(repository: repo)
            let router = buildRouter(
                repository: repo,
                adminKey: h.admin.publicKey,
                clock: h.clock.function,
                registrationsPerHour: registrationsPerHour
            )
            let app = Application(router: router)
            try await app.test(.router) { client in
                try await body(APIClient(client: client, harness: h))
            }
        }
    }
}

/// A registered and approved user as a test sees it.
struct TestUser: Sendable {
    let identity: Identity
    let certificate: Certificate
    let token: String
    let password: String
    var id: UUID { identity.userID }
}

struct APIClient: Sendable {
    let client: any TestClientProtocol
    let harness: APIHarness
    var admin: SigningKeyPair { harness.admin }
    var repository: any VaultRepository { harness.repository }

    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = .sortedKeys
        return e
    }()

    func send(
        _ method: HTTPRequest.Method,
        _ path: String,
        json: (any Encodable)? = nil,
        token: String? = nil,
        rawBody: [UInt8]? = nil,
        contentType: String? = "application/json",
        accept: String? = nil,
        idempotencyKey: String? = nil
    ) async throws -> TestResponse {
        var headers: HTTPFields = [.careVaultClient: CareVaultVersion.release]
        if let idempotencyKey { headers[HTTPField.Name(Idempotency.header)!] = idempotencyKey }
        if let contentType { headers[.contentType] = contentType }
        if let accept { headers[.accept] = accept }
        if let token { headers[.authorization] = "Bearer \(token)" }
        let body = try rawBody ?? json.map { Array(try Self.encoder.encode($0)) }
        return try await client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(bytes: $0) })
    }

    /// The id this deployment's signed admin requests name (Docs/envelope-v1.md §3.5).
    func deploymentID() async throws -> String {
        AdminRequestSignature.deploymentID(serverSecret: try await repository.serverSecret())
    }

    /// A request signed with `key` (the admin's unless given) at `timestamp` (now unless given).
    func adminSend(
        _ method: HTTPRequest.Method,
        _ path: String,
        json: (any Encodable)? = nil,
        key: SigningKeyPair? = nil,
        timestamp: UnixMillis? = nil,
        reuse: AdminRequestSignature.Headers? = nil,
        idempotencyKey: String? = nil
    ) async throws -> (TestResponse, AdminRequestSignature.Headers) {
        let body = try json.map { Array(try Self.encoder.encode($0)) } ?? []
        let deployment = try await deploymentID()
        let signed =
            reuse
            ?? AdminRequestSignature.sign(
                method: method.rawValue,
                pathAndQuery: path,
                body: body,
                timestamp: timestamp ?? harness.clock.millis,
                deploymentID: deployment,
                adminKey: key ?? admin
            )
        var headers: HTTPFields = [.contentType: "application/json", .careVaultClient: CareVaultVersion.release]
        headers[HTTPField.Name(AdminRequestSignature.timestampHeader)!] = signed.timestamp
        headers[HTTPField.Name(AdminRequestSignature.nonceHeader)!] = signed.nonce
        headers[HTTPField.Name(AdminRequestSignature.signatureHeader)!] = signed.signature
        if let idempotencyKey { headers[HTTPField.Name(Idempotency.header)!] = idempotencyKey }
        let r = try await client.execute(uri: path, method: method, headers: headers, body: body.isEmpty ? nil : ByteBuffer(bytes: body))
        return (r, signed)
    }

    func decode<T: Decodable>(_ type: T.Type, _ r: TestResponse) throws -> T {
        try JSONDecoder().decode(T.self, from: Data(r.body.readableBytesView))
    }

    func errorCode(_ r: TestResponse) -> APIErrorCode? {
        (try? JSONDecoder().decode(APIErrorBody.self, from: Data(r.body.readableBytesView)))?.error.code
    }

    // MARK: Flows

    func register(_ username: String, role: Role, password: String = "correct horse") async throws -> (Identity, RegistrationRequest, TestResponse) {
        let identity = Identity.generate()
        // One salt per password (not per account) in these suites, so the derivation is made once per
        // password and process (`DerivedPasswords`); salts themselves are tested where they matter.
        let salt = DerivedPasswords.salt(for: password)
        let keys = try await DerivedPasswords.keys(password: password, salt: salt, parameters: .interactive)
        let r = try RegistrationRequest.make(
            identity: identity,
            username: username,
            role: role,
            passwordKeys: keys,
            kdf: .interactive,
            salt: salt,
            requestedAt: harness.clock.millis
        )
        return (identity, r, try await send(.post, Routes.register, json: r))
    }

    func nextSequence() async throws -> UInt64 {
        let (r, _) = try await adminSend(.get, Routes.adminPending)
        return try decode(PendingResponse.self, r).nextSequence
    }

    func approve(_ r: RegistrationRequest) async throws -> (Certificate, TestResponse) {
        let cert = try Certificate.issue(
            userID: r.userID,
            username: r.username,
            role: r.role,
            signingKey: r.signingKey,
            boxKey: r.boxKey,
            issuedAt: harness.clock.millis,
            adminKey: admin
        )
        let approval = Approval.registration(cert, issuedAt: harness.clock.millis, sequence: try await nextSequence(), adminKey: admin)
        let (resp, _) = try await adminSend(
            .post,
            Routes.adminApproveRegistration(r.userID.uuidString),
            json: ApproveRegistrationRequest(certificate: cert, approval: approval)
        )
        return (cert, resp)
    }

    func loginParameters(_ username: String) async throws -> LoginParametersResponse {
        try decode(LoginParametersResponse.self, try await send(.post, Routes.loginParameters, json: LoginParametersRequest(username: username)))
    }

    /// A login with a random key: what a wrong password looks like to the server.
    func wrongLogin(_ username: String) async throws -> TestResponse {
        try await send(.post, Routes.login, json: LoginRequest(username: username, loginKey: Base64URL.encode(RandomBytes.bytes(count: 32))))
    }

    /// A registration approval of `certificate` signed with `key` (the admin's unless given).
    func approveRegistration(_ id: UUID, _ certificate: Certificate, sequence: UInt64, key: SigningKeyPair? = nil) async throws -> TestResponse {
        let approval = Approval.registration(certificate, issuedAt: 1, sequence: sequence, adminKey: key ?? admin)
        return try await adminSend(
            .post,
            Routes.adminApproveRegistration(id.uuidString),
            json: ApproveRegistrationRequest(certificate: certificate, approval: approval)
        ).0
    }

    /// The admin's answer to `approval` of the share `id`.
    func approveShare(_ id: UUID, with approval: Approval) async throws -> TestResponse {
        try await adminSend(.post, Routes.adminApproveShare(id.uuidString), json: ApproveShareRequest(approval: approval)).0
    }

    func login(_ username: String, password: String) async throws -> TestResponse {
        let params = try await loginParameters(username)
        let keys = try await DerivedPasswords.keys(password: password, salt: params.salt, parameters: params.kdf)
        return try await send(.post, Routes.login, json: LoginRequest(username: username, loginKey: Base64URL.encode(keys.loginKey.copyBytes())))
    }

    /// Registers, approves and logs in.
    func user(_ username: String, role: Role, password: String = "correct horse") async throws -> TestUser {
        let (identity, r, resp) = try await register(username, role: role, password: password)
        #expect(resp.status == .accepted)
        let (cert, approved) = try await approve(r)
        #expect(approved.status == .ok)
        let login = try await login(username, password: password)
        #expect(login.status == .ok)
        return TestUser(identity: identity, certificate: cert, token: try decode(LoginResponse.self, login).token, password: password)
    }

    /// Declares the patient's tresor of `category` (with the self-grant) and returns it.
    func declareTresor(_ patient: TestUser, _ tresor: Tresor, version: UInt64 = 1) async throws -> TestResponse {
        let selfGrant = try Grant.make(
            patient: patient.identity,
            member: patient.certificate,
            adminKey: admin.publicKey,
            tresor: tresor,
            tresorVersion: version,
            createdAt: harness.clock.millis
        )
        return try await send(.put, Routes.tresors, json: PutTresorRequest(selfGrant: selfGrant), token: patient.token)
    }

    /// Files a share request (no keys) of `tresor` with `doctor` and returns its info.
    func requestShare(_ patient: TestUser, _ doctor: TestUser, _ tresor: Tresor, expiresAt: UnixMillis? = nil) async throws -> ShareInfo {
        let grant = try Grant.request(
            patient: patient.identity,
            member: doctor.certificate,
            adminKey: admin.publicKey,
            ownerID: patient.id,
            category: tresor.category,
            tresorVersion: 1,
            createdAt: harness.clock.millis,
            expiresAt: expiresAt
        )
        let r = try await send(.post, Routes.shares, json: CreateShareRequest(grant: grant), token: patient.token)
        #expect(r.status == .created)
        return try decode(ShareInfo.self, r)
    }

    /// Seals every epoch of `tresor` to `doctor` in a successor of the approved request, as the patient's
    /// device does after the approval verified.
    func deliverKeys(_ patient: TestUser, _ doctor: TestUser, _ share: ShareInfo, _ tresor: Tresor) async throws -> TestResponse {
        let grant = try Grant.make(
            patient: patient.identity,
            member: doctor.certificate,
            adminKey: admin.publicKey,
            tresor: tresor,
            createdAt: harness.clock.millis,
            expiresAt: share.grant.expiresAt
        )
        return try await send(.put, Routes.shareGrant(share.shareID.uuidString), json: UpdateShareGrantRequest(grant: grant), token: patient.token)
    }

    func approveShare(_ share: ShareInfo) async throws -> TestResponse {
        let approval = Approval.share(
            id: share.shareID,
            grant: share.grant,
            issuedAt: harness.clock.millis,
            sequence: try await nextSequence(),
            adminKey: admin
        )
        return try await approveShare(share.shareID, with: approval)
    }

    /// A sealed envelope of `payload` for `patient`'s `tresor`.
    func envelope(
        _ patient: TestUser,
        _ tresor: Tresor,
        record: String,
        payload: String,
        physicalMs: UInt64? = nil,
        counter: UInt32 = 0,
        signer: SigningKeyPair? = nil,
        owner: UUID? = nil
    ) throws -> Envelope {
        let header = RecordHeader(
            ownerID: owner ?? patient.id,
            tresorID: tresor.id,
            category: tresor.category,
            epoch: tresor.currentEpoch,
            recordType: .activity,
            recordID: RecordID.make(type: .activity, activityID: record, occurrence: nil, key: patient.identity.recordIDKey),
            timestamp: HLCTimestamp(
                physicalMs: physicalMs ?? UInt64(harness.clock.millis),
                counter: counter,
                deviceID: "device-1"
            ),
            deleted: false,
            authorID: owner ?? patient.id
        )
        return try Envelope.seal(payload: Array(payload.utf8), header: header, key: tresor.currentKey, author: signer ?? patient.identity.signing)
    }

    /// Pushes `envelopes` as one binary batch (Docs/envelope-v1.md §7.2), as the clients do.
    func push(_ patient: TestUser, _ envelopes: [Envelope]) async throws -> (TestResponse, PushResponse?) {
        let batch = try EnvelopeFrame.encode(envelopes)
        let r = try await send(.post, Routes.records, token: patient.token, rawBody: batch, contentType: RecordMediaType.batch)
        return (r, try? decode(PushResponse.self, r))
    }

    /// A pull asking for the binary page (§7.3), as the clients do; `page(_:after:)` reads the answer.
    func pull(_ token: String, owner: UUID? = nil, tresor: UUID? = nil, since: UInt64 = 0, limit: Int? = nil) async throws -> TestResponse {
        var q: [String] = []
        if let owner { q.append("owner=\(owner.uuidString)") }
        if let tresor { q.append("tresor=\(tresor.uuidString)") }
        q.append("since=\(since)")
        if let limit { q.append("limit=\(limit)") }
        let headers: HTTPFields = [.authorization: "Bearer \(token)", .careVaultClient: CareVaultVersion.release, .accept: RecordMediaType.page]
        return try await client.execute(uri: Routes.records + "?" + q.joined(separator: "&"), method: .get, headers: headers, body: nil)
    }

    /// The binary page of a pull that followed `cursor`, every envelope decoded.
    func page(_ r: TestResponse, after cursor: UInt64 = 0) throws -> PulledChanges {
        #expect(r.status == .ok && r.headers[.contentType] == RecordMediaType.page)
        let frame = try PullPageFrame(bytes: Array(r.body.readableBytesView), after: cursor)
        let changes = try frame.changes.map { PulledChanges.Change(sequence: $0.sequence, envelope: try frame.envelope(of: $0)) }
        return PulledChanges(changes: changes, nextCursor: frame.nextCursor, done: frame.done, commitments: frame.commitments)
    }
}

/// A pulled page as a test reads it: each change with its decoded envelope.
struct PulledChanges {
    struct Change {
        var sequence: UInt64
        var envelope: Envelope
    }

    var changes: [Change]
    var nextCursor: UInt64
    var done: Bool
    var commitments: [StateCommitment]
}

extension HTTPField.Name {
    /// The header in which every client names its release (Docs/design.md §8); the tests speak as the current one.
    static let careVaultClient = HTTPField.Name(CareVaultVersion.clientHeader)!
}

/// The password keys this process derived, by password, salt and parameters: the API suites register and
/// log in hundreds of accounts with a few passwords, and each Argon2id run is 64 MiB and a tenth of a second
/// of a core (on a loaded two-core machine a test of 17 of them waited minutes behind the others'). A
/// derivation asked again while it runs waits for it.
enum DerivedPasswords {
    private static let derived = NIOLockedValueBox<[String: Task<PasswordKeys, any Error>]>([:])

    /// A salt of `password`'s own: the first 16 bytes of its BLAKE2b hash.
    static func salt(for password: String) -> Salt {
        try! Salt(bytes: Array(try! BLAKE2b.hash(Array(("CareVault-test-salt:" + password).utf8)).prefix(Salt.byteCount)))
    }

    static func keys(password: String, salt: Salt, parameters: KDFParameters) async throws -> PasswordKeys {
        let name = "\(password)\u{0}\(salt.base64URL)\u{0}\(parameters)"
        let task = derived.withLockedValue { known in
            if let task = known[name] { return task }
            let task = Task { try await PasswordKeys.derive(password: password, salt: salt, parameters: parameters) }
            known[name] = task
            return task
        }
        return try await task.value
    }
}
