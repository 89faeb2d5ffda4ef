import Foundation
import GRDB
import GRDBSQLite
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import PostgresNIO
import Synchronization
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// The account lifecycle attacked (issue 24 §1-5, Docs/design.md §2): a stolen session token, a thief
/// who knows the password racing a password change or a suspension, guesses and logins sent together,
/// and the login parameters as an account-enumeration oracle. Each test fails without its fix.
@Suite("API: the account lifecycle under attack (both backends)")
struct AccountAttackTests {
    // MARK: Helpers

    /// The login key of `password` under the parameters the server gives for `username`.
    static func loginKey(_ api: APIClient, _ username: String, _ password: String) async throws -> String {
        let params = try await api.loginParameters(username)
        return Base64URL.encode(try await PasswordKeys.derive(password: password, salt: params.salt, parameters: params.kdf).loginKey.copyBytes())
    }

    /// New credentials for `user` under `password`, signed by the account's key (Docs/envelope-v1.md §2.4).
    static func update(_ user: TestUser, password: String, changedAt: UnixMillis) async throws -> CredentialUpdate {
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: password, salt: salt, parameters: .interactive)
        var u = CredentialUpdate(
            userID: user.id,
            kdf: .interactive,
            salt: salt,
            loginVerifier: Base64URL.encode(keys.loginVerifier),
            keyBundle: KeyBundle.seal(user.identity, wrappingKey: keys.wrappingKey, kdf: .interactive, salt: salt),
            changedAt: changedAt,
            signature: user.identity.signing.sign([])
        )
        u.signature = user.identity.signing.sign(u.statementBytes)
        var p = CredentialParameters(userID: user.id, kdf: .interactive, salt: salt, changedAt: changedAt, signature: user.identity.signing.sign([]))
        p.signature = user.identity.signing.sign(p.statementBytes)
        u.parameters = p
        return u
    }

    /// A recovery enrollment of a random recovery login key (the server never sees the recovery key itself,
    /// only this key's verifier; the bundle is opaque to it) and the key, base64url.
    static func recovery(for id: UUID) -> (RecoveryEnrollment, String) {
        let key = RandomBytes.bytes(count: 32)
        let bundle = RecoveryBundle(userID: id, nonce: .random(), ciphertext: Base64URL.encode(RandomBytes.bytes(count: 120)))
        return (RecoveryEnrollment(bundle: bundle, verifier: Base64URL.encode(VaultService.recoveryVerifier(key))), Base64URL.encode(key))
    }

    /// A registered, approved and logged-in patient with a recovery key; returns the user and that key.
    static func patientWithRecovery(_ api: APIClient, _ username: String, password: String) async throws -> (TestUser, String) {
        let identity = Identity.generate()
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: password, salt: salt, parameters: .interactive)
        let r = try RegistrationRequest.make(
            identity: identity,
            username: username,
            role: .patient,
            passwordKeys: keys,
            kdf: .interactive,
            salt: salt,
            requestedAt: api.harness.clock.millis
        )
        let (enrollment, key) = recovery(for: identity.userID)
        #expect(try await api.send(.post, Routes.register, json: RegistrationSubmission(request: r, recovery: enrollment)).status == .accepted)
        let (cert, approved) = try await api.approve(r)
        #expect(approved.status == .ok)
        let login = try await api.login(username, password: password)
        let token = try api.decode(LoginResponse.self, login).token
        return (TestUser(identity: identity, certificate: cert, token: token, password: password), key)
    }

    static func sessionRows(_ api: APIClient, _ user: TestUser) async throws -> [SessionEntry] {
        try await api.repository.sessionEntries(userID: user.id, now: api.harness.clock.millis)
    }

    /// The audit entries of `action`.
    static func audited(_ api: APIClient, _ action: String) async throws -> [AuditEntry] {
        try await api.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).filter { $0.action == action }
    }

    // MARK: 1. A stolen session token alone deletes nothing

    @Test(arguments: Backend.allCases)
    func aStolenSessionAloneCannotDeleteTheAccount(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (alice, recoveryKey) = try await Self.patientWithRecovery(api, "alice", password: "alice's password")
            func delete(_ body: DeleteAccountRequest, _ token: String) async throws -> TestResponse {
                try await api.send(.post, Routes.deleteAccount, json: body, token: token)
            }
            // The thief has the token and knows the username; the body names the account.
            let bare = try await delete(DeleteAccountRequest(confirmUsername: "alice"), alice.token)
            #expect(bare.status == .badRequest, "a session and the username are not enough")
            let wrong = try await delete(
                DeleteAccountRequest(confirmUsername: "alice", currentLoginKey: Base64URL.encode(RandomBytes.bytes(count: 32))),
                alice.token
            )
            #expect(wrong.status == .unauthorized && api.errorCode(wrong) == .invalidCredentials)
            let wrongRecovery = try await delete(
                DeleteAccountRequest(confirmUsername: "alice", recoveryLoginKey: Base64URL.encode(RandomBytes.bytes(count: 32))),
                alice.token
            )
            #expect(wrongRecovery.status == .unauthorized && api.errorCode(wrongRecovery) == .invalidCredentials)
            let both = try await delete(
                DeleteAccountRequest(
                    confirmUsername: "alice",
                    currentLoginKey: try await Self.loginKey(api, "alice", alice.password),
                    recoveryLoginKey: recoveryKey
                ),
                alice.token
            )
            #expect(both.status == .badRequest, "one proof, not two")
            #expect(try await api.repository.user(id: alice.id) != nil, "nothing was deleted")
            #expect(try await Self.audited(api, "account.deleted").isEmpty)
            // The owner proves the password: the account goes.
            let proven = try await delete(
                DeleteAccountRequest(confirmUsername: "alice", currentLoginKey: try await Self.loginKey(api, "alice", alice.password)),
                alice.token
            )
            #expect(proven.status == .ok, "\(String(decoding: proven.body.readableBytesView, as: UTF8.self))")
            #expect(try await api.repository.user(id: alice.id) == nil)
            // Or the recovery key, for one who lost the password.
            let (bob, bobRecovery) = try await Self.patientWithRecovery(api, "bob", password: "bob's password")
            let recovered = try await delete(DeleteAccountRequest(confirmUsername: "bob", recoveryLoginKey: bobRecovery), bob.token)
            #expect(recovered.status == .ok)
            #expect(try await api.repository.user(id: bob.id) == nil)
        }
    }

    /// Guesses through the deletion (or any route that checks the password behind a session) meet the login
    /// back-off: a stolen session is no unthrottled password oracle.
    @Test(arguments: Backend.allCases)
    func passwordChecksBehindASessionMeetTheBackOff(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let carol = try await api.user("carol", role: .patient, password: "carol's password")
            var statuses: [HTTPResponse.Status] = []
            // The account logged in from this address, so only the address's back-off applies here.
            for _ in 0..<15 {
                let guess = DeleteAccountRequest(confirmUsername: "carol", currentLoginKey: Base64URL.encode(RandomBytes.bytes(count: 32)))
                statuses.append(try await api.send(.post, Routes.deleteAccount, json: guess, token: carol.token).status)
            }
            #expect(statuses.contains(.tooManyRequests), "\(statuses)")
            #expect(statuses.filter { $0 == .unauthorized }.count == LoginRateLimiter.Limits().freeAddressFailures + 1)
            #expect(try await api.repository.user(id: carol.id) != nil)
        }
    }

    // MARK: 2. Sessions made while a password change or a suspension commits

    /// What the test's own transaction does while a login waits for it.
    enum Change: Sendable {
        case password(UUID, CredentialUpdate, keeping: String)
        case suspension(UUID)

        /// The change's own flow, in the test's transaction on `sql`.
        func run(_ sql: some SQLConnection, now: UnixMillis) async throws {
            switch self {
            case .password(let id, let update, let keeping):
                try await AccountFlow.changeCredentials(sql, userID: id, update, expecting: 0, keeping: keeping, now: now, audit: Fixtures.audit)
            case .suspension(let id):
                try await AccountFlow.setSuspension(sql, userID: id, reason: "under review", now: now, audit: Fixtures.audit)
            }
        }
    }

    /// Counts how often a SQLite connection found the database locked (its busy handler's calls).
    final class BusyCount: Sendable {
        let calls = Atomic<Int>(0)
    }

    /// Starts `request` while the test holds a transaction open, waits until the request waits for it,
    /// runs `change` in that transaction and commits. The request has read the account by then (the login
    /// reads it before its first write), so the change commits between its read and its write: the race,
    /// every time. PostgreSQL: the transaction locks `login_throttle`, which the login writes first.
    /// SQLite: the test's connection holds the write lock, and the server's writer reports its wait
    /// through a busy handler the test installs.
    static func holding<T: Sendable>(
        _ repo: any VaultRepository,
        while request: @escaping @Sendable () async throws -> T,
        _ change: Change,
        now: UnixMillis
    ) async throws -> Task<T, any Error> {
        if let pg = repo as? PostgresRepository {
            return try await pg.transaction { conn in
                try await conn.query("LOCK TABLE login_throttle IN EXCLUSIVE MODE", logger: pg.logger)
                let task = Task { try await request() }
                try await PostgresStoreLockTests.untilSomeoneWaits(pg)
                try await change.run(PostgresSQL(connection: conn, logger: pg.logger), now: now)
                return task
            }
        }
        let sqlite = try #require(repo as? SQLiteRepository)
        let busy = BusyCount()
        try await sqlite.pool.writeWithoutTransaction { db in
            // Retained for good: the handler stays on the writer connection for the rest of this database's life.
            let context = Unmanaged.passRetained(busy).toOpaque()
            _ = sqlite3_busy_handler(
                db.sqliteConnection,
                { context, tries in
                    Unmanaged<BusyCount>.fromOpaque(context!).takeUnretainedValue().calls.add(1, ordering: .sequentiallyConsistent)
                    // blocking: in SQLite's busy handler, on the waiting connection's thread
                    usleep(2_000)
                    return tries < 10_000 ? 1 : 0
                },
                context
            )
        }
        var config = Configuration()
        config.busyMode = .timeout(10)
        let held = try DatabaseQueue(path: sqlite.pool.path, configuration: config)
        defer { try? held.close() }
        let box = NIOLockedValueBox<Task<T, any Error>?>(nil)
        try await held.writeWithoutTransaction { db in
            try db.inTransaction(.immediate) {
                box.withLockedValue { $0 = Task { try await request() } }
                // blocking: on GRDB's writer queue, holding the transaction the request waits for
                for _ in 0..<5_000 where busy.calls.load(ordering: .sequentiallyConsistent) == 0 { usleep(2_000) }
                #expect(busy.calls.load(ordering: .sequentiallyConsistent) > 0, "the request never waited for the held transaction")
                try db.run { sql in try await change.run(sql, now: now) }
                return .commit
            }
        }
        return try #require(box.withLockedValue { $0 })
    }

    /// A thief who knows the password logs in while the patient changes it: the login read the old
    /// credentials, the change commits, then the login would store its session. It opens none, and the
    /// patient's own session (the one that changed the password) is the only one left.
    @Test(arguments: Backend.allCases)
    func aLoginRacingAPasswordChangeOpensNoSession(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient, password: "the old password")
            let thief = LoginRequest(username: "alice", loginKey: try await Self.loginKey(api, "alice", "the old password"), deviceName: "thief")
            let update = try await Self.update(alice, password: "the new password", changedAt: api.harness.clock.millis)
            let login = try await Self.holding(
                api.repository,
                while: { try await api.send(.post, Routes.login, json: thief) },
                .password(alice.id, update, keeping: VaultService.tokenHash(alice.token)),
                now: api.harness.clock.millis
            )
            let answer = try await login.value
            #expect(answer.status == .unauthorized && api.errorCode(answer) == .invalidCredentials, "\(answer.status)")
            if answer.status == .ok, let token = try? api.decode(LoginResponse.self, answer).token {
                #expect(try await api.send(.get, Routes.tresors, token: token).status == .unauthorized, "the thief's session works")
            }
            #expect(try await Self.sessionRows(api, alice).map(\.tokenHash) == [VaultService.tokenHash(alice.token)])
            #expect(try await api.send(.get, Routes.tresors, token: alice.token).status == .ok, "the patient's own session stays")
        }
    }

    /// A doctor logs in while the admin suspends the account: no session opens, so none can pull the
    /// patient's records afterwards.
    @Test(arguments: Backend.allCases)
    func aLoginRacingASuspensionOpensNoSession(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let doctor = try await api.user("drbob", role: .doctor, password: "drbob's password")
            let request = LoginRequest(username: "drbob", loginKey: try await Self.loginKey(api, "drbob", doctor.password))
            let login = try await Self.holding(
                api.repository,
                while: { try await api.send(.post, Routes.login, json: request) },
                .suspension(doctor.id),
                now: api.harness.clock.millis
            )
            let answer = try await login.value
            #expect(answer.status == .forbidden, "\(answer.status)")
            if answer.status == .ok, let token = try? api.decode(LoginResponse.self, answer).token {
                #expect(try await api.send(.get, Routes.doctorPatients, token: token).status != .ok, "the suspended doctor's session works")
            }
            #expect(try await Self.sessionRows(api, doctor).isEmpty)
        }
    }

    /// Whatever slipped past (an edited database, an instance of an older version): a session made under
    /// older credentials is refused on its next request, and a suspended account's sessions on every one.
    @Test(arguments: Backend.allCases)
    func everyRequestChecksTheCredentialGenerationAndTheSuspension(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient)
            let doctor = try await api.user("drbob", role: .doctor)
            #expect(try await api.send(.get, Routes.tresors, token: alice.token).status == .ok)
            // A credential change whose sessions were not ended (the generation moved, the rows stayed).
            try await api.repository.databaseOperator.raiseCredentialGeneration(of: "alice")
            let stale = try await api.send(.get, Routes.tresors, token: alice.token)
            #expect(stale.status == .unauthorized && api.errorCode(stale) == .unauthorized)
            #expect(try await Self.sessionRows(api, alice).isEmpty, "not listed either")
            // A suspension whose sessions were not ended.
            #expect(try await api.send(.get, Routes.doctorPatients, token: doctor.token).status == .ok)
            try await api.repository.databaseOperator.setSuspended("drbob", true)
            #expect(try await api.send(.get, Routes.doctorPatients, token: doctor.token).status == .forbidden)
            try await api.repository.databaseOperator.setSuspended("drbob", false)
            #expect(try await api.send(.get, Routes.doctorPatients, token: doctor.token).status == .ok, "reinstated")
        }
    }

    /// A password change by the session that stays keeps that session working; every other ends.
    @Test(arguments: Backend.allCases)
    func aPasswordChangeKeepsItsOwnSessionAndRequiresALaterChangedAt(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient, password: "password one")
            let other = try api.decode(LoginResponse.self, try await api.login("alice", password: "password one")).token
            let now = api.harness.clock.millis
            func change(_ from: String, _ update: CredentialUpdate) async throws -> TestResponse {
                let request = PasswordChangeRequest(currentLoginKey: try await Self.loginKey(api, "alice", from), update: update)
                return try await api.send(.post, Routes.passwordChange, json: request, token: alice.token)
            }
            #expect(try await change("password one", try Self.update(alice, password: "password two", changedAt: now)).status == .noContent)
            #expect(try await api.send(.get, Routes.tresors, token: alice.token).status == .ok, "the changing session stays")
            #expect(try await api.send(.get, Routes.tresors, token: other).status == .unauthorized)
            // A change that does not move `changedAt` forward is refused: a device keeps the newest change and
            // refuses older ones, so the server must never store an older one over a newer.
            for changedAt in [now, now - 1] {
                let stale = try await change("password two", try Self.update(alice, password: "password three", changedAt: changedAt))
                #expect(stale.status == .conflict, "changedAt \(changedAt - now)")
            }
            #expect(try await api.login("alice", password: "password two").status == .ok)
            // Dated far ahead (a password holder's, or a clock run ahead), it would block every later change and
            // recovery for good: refused past the server's clock and the allowed drift.
            let drift = Int64(APILimits.maxForwardDriftMs)
            for changedAt in [Int64.max, now + drift + 60_000] {
                let ahead = try await change("password two", try Self.update(alice, password: "password three", changedAt: changedAt))
                #expect(ahead.status == .badRequest, "changedAt \(changedAt)")
            }
            #expect(try await change("password two", try Self.update(alice, password: "password three", changedAt: now + 1)).status == .noContent)
        }
    }

    // MARK: 3. Guesses sent together

    /// 100 wrong logins sent at once: only the free failures are checked (as sequentially), the rest wait.
    @Test(arguments: Backend.allCases)
    func wrongLoginsSentTogetherMeetTheBackOffInTurn(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            // Approved, and never logged in from here: the username's back-off applies.
            let (_, registration, _) = try await api.register("victim", role: .patient)
            #expect(try await api.approve(registration).1.status == .ok)
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for _ in 0..<100 { group.addTask { try await api.wrongLogin("victim").status } }
                return try await group.reduce(into: [HTTPResponse.Status]()) { $0.append($1) }
            }
            let checked = statuses.filter { $0 == .unauthorized }.count
            #expect(checked == LoginRateLimiter.Limits().freeUsernameFailures + 1, "\(checked) of 100 were checked")
            #expect(statuses.filter { $0 == .tooManyRequests }.count == 100 - checked)
            #expect(try await Self.audited(api, "login.failed").count == checked)
        }
    }

    // MARK: 4. Sessions and audit entries per account

    /// Logins past the cap end the oldest sessions; successful logins per account are limited; repeated
    /// logins of one device from one address are audited once an hour.
    @Test(arguments: Backend.allCases)
    func sessionsAreCappedLoginsLimitedAndRepeatedLoginsAuditedOnce(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient, password: "alice's password")
            let key = try await Self.loginKey(api, "alice", alice.password)
            let limits = LoginRateLimiter.Limits()
            func login() async throws -> TestResponse {
                try await api.send(.post, Routes.login, json: LoginRequest(username: "alice", loginKey: key, deviceName: "script"))
            }
            // `user` logged in once; the window allows `successesPerWindow` in all.
            var tokens = [alice.token]
            for _ in 1..<limits.successesPerWindow {
                let r = try await login()
                #expect(r.status == .ok)
                tokens.append(try api.decode(LoginResponse.self, r).token)
                api.harness.clock.advance(by: 1)
            }
            let limited = try await login()
            #expect(limited.status == .tooManyRequests && api.errorCode(limited) == .rateLimited)
            #expect(Int(limited.headers[.retryAfter] ?? "") ?? 0 >= 1)
            api.harness.clock.advance(by: limits.successWindowMs)
            for _ in 0..<5 {
                let r = try await login()
                #expect(r.status == .ok)
                tokens.append(try api.decode(LoginResponse.self, r).token)
                api.harness.clock.advance(by: 1)
            }
            let live = try await Self.sessionRows(api, alice)
            #expect(live.count == APILimits.maxSessionsPerAccount)
            #expect(Set(live.map(\.tokenHash)) == Set(tokens.suffix(APILimits.maxSessionsPerAccount).map(VaultService.tokenHash)), "the newest stay")
            #expect(try await api.send(.get, Routes.tresors, token: tokens[0]).status == .unauthorized, "the oldest ended")
            // One entry for the harness's login (no device name) and one for the script's 24: same account,
            // address and device within the hour.
            #expect(try await Self.audited(api, "login").count == 2)
            api.harness.clock.advance(by: APILimits.loginAuditIntervalMs)
            #expect(try await login().status == .ok)
            #expect(try await Self.audited(api, "login").count == 3, "audited again after the hour")
        }
    }

    // MARK: 5. Login parameters as an enumeration oracle

    /// Unknown names answer in the shapes real accounts answer in, an account that changed its password
    /// included, with every fake stable.
    @Test(arguments: Backend.allCases)
    func unknownNamesAnswerInTheShapesOfRealAccounts(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient, password: "password one")
            let request = PasswordChangeRequest(
                currentLoginKey: try await Self.loginKey(api, "alice", "password one"),
                update: try await Self.update(alice, password: "password two", changedAt: api.harness.clock.millis)
            )
            #expect(try await api.send(.post, Routes.passwordChange, json: request, token: alice.token).status == .noContent)
            _ = try await api.user("bob", role: .patient)
            func shape(_ name: String) async throws -> (keys: [String], cp: [String], body: String) {
                let r = try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: name))
                let json = try #require(try JSONSerialization.jsonObject(with: Data(r.body.readableBytesView)) as? [String: Any])
                return (
                    json.keys.sorted(), (json["credentialParameters"] as? [String: Any])?.keys.sorted() ?? [],
                    String(decoding: r.body.readableBytesView, as: UTF8.self)
                )
            }
            let changed = try await shape("alice")
            let unchanged = try await shape("bob")
            #expect(changed.keys != unchanged.keys)
            var seen: Set<[String]> = []
            for i in 0..<24 {
                let fake = try await shape("nobody-\(i)")
                #expect(fake.keys == changed.keys || fake.keys == unchanged.keys, "\(fake.keys)")
                if !fake.cp.isEmpty { #expect(fake.cp == changed.cp) }
                #expect(try await shape("nobody-\(i)").body == fake.body, "stable")
                seen.insert(fake.keys)
                let decoded = try api.decode(
                    LoginParametersResponse.self,
                    try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: "nobody-\(i)"))
                )
                if let cp = decoded.credentialParameters {
                    #expect(cp.salt == decoded.salt && cp.kdf == decoded.kdf && cp.changedAt < api.harness.clock.millis)
                }
            }
            #expect(seen == [changed.keys, unchanged.keys], "unknown names take both shapes")
        }
    }

    // MARK: Recovery key rotation (issue 23 §7)

    @Test(arguments: Backend.allCases)
    func aRotatedRecoveryKeyReplacesTheOldOne(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (alice, old) = try await Self.patientWithRecovery(api, "alice", password: "alice's password")
            func bundle(_ key: String) async throws -> HTTPResponse.Status {
                try await api.send(.post, Routes.recoveryBundle, json: RecoveryProof(username: "alice", recoveryLoginKey: key)).status
            }
            #expect(try await bundle(old) == .ok)
            let (enrollment, new) = Self.recovery(for: alice.id)
            let stolen = RecoveryRotationRequest(currentLoginKey: Base64URL.encode(RandomBytes.bytes(count: 32)), recovery: enrollment)
            #expect(try await api.send(.post, Routes.recoveryRotate, json: stolen, token: alice.token).status == .unauthorized, "a session alone")
            let (foreign, _) = Self.recovery(for: UUID())
            let misnamed = RecoveryRotationRequest(currentLoginKey: try await Self.loginKey(api, "alice", alice.password), recovery: foreign)
            #expect(try await api.send(.post, Routes.recoveryRotate, json: misnamed, token: alice.token).status == .badRequest)
            // The password alone (someone who learned it) cannot take the owner's way back away.
            let passwordOnly = RecoveryRotationRequest(currentLoginKey: try await Self.loginKey(api, "alice", alice.password), recovery: enrollment)
            #expect(try await api.send(.post, Routes.recoveryRotate, json: passwordOnly, token: alice.token).status == .badRequest)
            let wrongKey = RecoveryRotationRequest(
                currentLoginKey: try await Self.loginKey(api, "alice", alice.password),
                currentRecoveryLoginKey: Base64URL.encode(RandomBytes.bytes(count: 32)),
                recovery: enrollment
            )
            #expect(try await api.send(.post, Routes.recoveryRotate, json: wrongKey, token: alice.token).status == .unauthorized)
            #expect(try await bundle(old) == .ok, "nothing was replaced")
            let rotation = RecoveryRotationRequest(
                currentLoginKey: try await Self.loginKey(api, "alice", alice.password),
                currentRecoveryLoginKey: old,
                recovery: enrollment
            )
            #expect(try await api.send(.post, Routes.recoveryRotate, json: rotation, token: alice.token).status == .noContent)
            #expect(try await bundle(old) == .unauthorized, "the old key stopped working")
            #expect(try await bundle(new) == .ok)
            #expect(try await Self.audited(api, "account.recovery-key-replaced").count == 1)
        }
    }

    /// Someone who knows the password and logs in until the cap answers 429 does not hold off the owner's
    /// recovery: recovery-key proofs are not counted against the successful-login cap.
    @Test(arguments: Backend.allCases)
    func usingUpTheLoginsDoesNotCloseTheWayBack(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (_, recoveryKey) = try await Self.patientWithRecovery(api, "alice", password: "alice's password")
            let key = try await Self.loginKey(api, "alice", "alice's password")
            var status: HTTPResponse.Status = .ok
            for _ in 0..<(LoginRateLimiter.Limits().successesPerWindow + 1) where status == .ok {
                status = try await api.send(.post, Routes.login, json: LoginRequest(username: "alice", loginKey: key, deviceName: "thief")).status
                api.harness.clock.advance(by: 1)
            }
            #expect(status == .tooManyRequests, "the cap was reached")
            let proof = RecoveryProof(username: "alice", recoveryLoginKey: recoveryKey)
            #expect(try await api.send(.post, Routes.recoveryBundle, json: proof).status == .ok, "the owner's recovery still answers")
        }
    }
}
