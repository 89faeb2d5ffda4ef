import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// `Idempotency-Key` on the server (Docs/design.md §6.2): a retry of a non-idempotent request gets the first
/// try's answer and makes no second effect; a key is bound to its scope and request; what is kept cannot be
/// read or moved by whoever holds the database.
@Suite("API: idempotency keys")
struct IdempotencyTests {
    static let replayed = HTTPField.Name(Idempotency.replayedHeader)!

    static func key() -> String { Base64URL.encode(RandomBytes.bytes(count: 16)) }

    /// A share request of `category` from `patient` to `doctor`, as the client sends it.
    static func shareRequest(
        _ api: APIClient,
        _ patient: TestUser,
        _ doctor: TestUser,
        _ category: String
    ) async throws
        -> CreateShareRequest
    {
        let tresor = Tresor.create(ownerID: patient.id, category: category)
        #expect(try await api.declareTresor(patient, tresor).status == .ok)
        let grant = try Grant.request(
            patient: patient.identity,
            member: doctor.certificate,
            adminKey: api.admin.publicKey,
            ownerID: patient.id,
            category: category,
            tresorVersion: 1,
            createdAt: api.harness.clock.millis,
            expiresAt: nil
        )
        return CreateShareRequest(grant: grant)
    }

    @Test(arguments: Backend.allCases)
    func aRetriedShareRequestGetsTheFirstAnswerAndMakesOneShare(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient)
            let doctor = try await api.user("drbob", role: .doctor)
            let request = try await Self.shareRequest(api, alice, doctor, "interventions")
            let key = Self.key()
            let first = try await api.send(.post, Routes.shares, json: request, token: alice.token, idempotencyKey: key)
            #expect(first.status == .created)
            #expect(first.headers[Self.replayed] == nil)
            let again = try await api.send(.post, Routes.shares, json: request, token: alice.token, idempotencyKey: key)
            #expect(again.status == .created)
            #expect(again.headers[Self.replayed] == "true")
            #expect(again.headers[.contentType] == "application/json")
            #expect(Array(again.body.readableBytesView) == Array(first.body.readableBytesView), "the first answer, byte for byte")
            #expect(try await api.repository.shares(patientID: alice.id).count == 1)
            // The same request under a new key runs again, and is refused as the duplicate it is; a refusal
            // changed nothing and is not kept, so its retry runs again too.
            let second = Self.key()
            #expect(try await api.send(.post, Routes.shares, json: request, token: alice.token, idempotencyKey: second).status == .conflict)
            let refusedAgain = try await api.send(.post, Routes.shares, json: request, token: alice.token, idempotencyKey: second)
            #expect(refusedAgain.status == .conflict)
            #expect(refusedAgain.headers[Self.replayed] == nil)
            #expect(try await api.repository.shares(patientID: alice.id).count == 1)
            // Routes that change nothing take no key: the login parameters are read anew each time.
            let params = Self.key()
            _ = try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: "alice"), idempotencyKey: params)
            let read = try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: "alice"), idempotencyKey: params)
            #expect(read.status == .ok && read.headers[Self.replayed] == nil)
        }
    }

    @Test(arguments: Backend.allCases)
    func aKeySentWithAnotherRequestIsRefused(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient)
            let doctor = try await api.user("drbob", role: .doctor)
            let key = Self.key()
            let interventions = try await Self.shareRequest(api, alice, doctor, "interventions")
            let assessments = try await Self.shareRequest(api, alice, doctor, "assessments")
            #expect(try await api.send(.post, Routes.shares, json: interventions, token: alice.token, idempotencyKey: key).status == .created)
            let other = try await api.send(.post, Routes.shares, json: assessments, token: alice.token, idempotencyKey: key)
            #expect(other.status == .conflict)
            #expect(try api.decode(APIErrorBody.self, other).error.code == .idempotencyKeyReused)
            // Another route with the same key and no body is another request too.
            let logout = try await api.send(.post, Routes.logout, token: alice.token, idempotencyKey: key)
            #expect(try api.decode(APIErrorBody.self, logout).error.code == .idempotencyKeyReused)
            #expect(try await api.repository.shares(patientID: alice.id).map(\.category) == ["interventions"])
            // A malformed key is refused before anything runs.
            for bad in ["short", String(repeating: "a", count: 65), "has space in it ok", "ünïcödé-key-long-enough"] {
                let r = try await api.send(.post, Routes.shares, json: assessments, token: alice.token, idempotencyKey: bad)
                #expect(r.status == .badRequest, "\(bad)")
            }
            #expect(try await api.repository.shares(patientID: alice.id).count == 1)
        }
    }

    @Test(arguments: Backend.allCases)
    func aKeyBelongsToItsSession(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient)
            let carol = try await api.user("carol", role: .patient)
            let doctor = try await api.user("drbob", role: .doctor)
            let key = Self.key()
            let fromAlice = try await Self.shareRequest(api, alice, doctor, "interventions")
            let fromCarol = try await Self.shareRequest(api, carol, doctor, "interventions")
            #expect(try await api.send(.post, Routes.shares, json: fromAlice, token: alice.token, idempotencyKey: key).status == .created)
            // The same key in carol's session is carol's own: it runs, and is not told of alice's.
            let r = try await api.send(.post, Routes.shares, json: fromCarol, token: carol.token, idempotencyKey: key)
            #expect(r.status == .created)
            #expect(r.headers[Self.replayed] == nil)
            #expect(try await api.repository.shares(patientID: carol.id).count == 1)
        }
    }

    /// A password change whose first try went through is answered again, not refused for the old password
    /// (which no longer proves anything): the tool would otherwise keep the old key bundle.
    @Test(arguments: Backend.allCases)
    func aRetriedPasswordChangeIsAnsweredAsTheFirst(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient, password: "password one")
            let request = PasswordChangeRequest(
                currentLoginKey: try await AccountAttackTests.loginKey(api, "alice", "password one"),
                update: try await AccountAttackTests.update(alice, password: "password two", changedAt: api.harness.clock.millis)
            )
            let key = Self.key()
            #expect(try await api.send(.post, Routes.passwordChange, json: request, token: alice.token, idempotencyKey: key).status == .noContent)
            let again = try await api.send(.post, Routes.passwordChange, json: request, token: alice.token, idempotencyKey: key)
            #expect(again.status == .noContent)
            #expect(again.headers[Self.replayed] == "true")
            // Without the key the retry is what it always was: the old password is wrong now.
            #expect(try await api.send(.post, Routes.passwordChange, json: request, token: alice.token).status == .unauthorized)
            #expect(try await api.login("alice", password: "password two").status == .ok)
        }
    }

    /// A refusal that says nothing of the request (401) is not kept: a retry with the same key runs again.
    @Test(arguments: Backend.allCases)
    func aRefusedFirstTryIsNotKept(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient, password: "password one")
            let key = Self.key()
            let update = try await AccountAttackTests.update(alice, password: "password two", changedAt: api.harness.clock.millis)
            let wrong = PasswordChangeRequest(
                currentLoginKey: try await AccountAttackTests.loginKey(api, "alice", "not the password"),
                update: update
            )
            #expect(try await api.send(.post, Routes.passwordChange, json: wrong, token: alice.token, idempotencyKey: key).status == .unauthorized)
            // Same key, same request: run again (still wrong), not answered from a store.
            let again = try await api.send(.post, Routes.passwordChange, json: wrong, token: alice.token, idempotencyKey: key)
            #expect(again.status == .unauthorized)
            #expect(again.headers[Self.replayed] == nil)
            // A session that is not one is refused before any key is kept.
            let stranger = try await api.send(.post, Routes.logout, token: "not-a-session-token", idempotencyKey: key)
            #expect(stranger.status == .unauthorized)
            #expect(try await api.login("alice", password: "password one").status == .ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func aRetryWhileTheFirstTryRunsWaitsAndAnAbandonedTryIsTakenOver(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient)
            let doctor = try await api.user("drbob", role: .doctor)
            let request = try await Self.shareRequest(api, alice, doctor, "interventions")
            let key = Self.key()
            // The first try, as it stands while its handler runs: claimed, no answer yet.
            let body = Array(try APIClient.encoder.encode(request))
            let keys = StoredAnswerKeys(scope: "session:" + VaultService.tokenHash(alice.token), key: key, body: body)
            let fingerprint = keys.fingerprint(method: "POST", path: Routes.shares, body: body)
            let now = api.harness.clock.millis
            let claimed = try await api.repository.claimIdempotencyKey(keys.id, fingerprint: fingerprint, now: now, abandonedBefore: 0)
            guard case let .claimed(firstClaim) = claimed else {
                Issue.record("not claimed: \(claimed)")
                return
            }
            let waiting = try await api.send(.post, Routes.shares, token: alice.token, rawBody: body, idempotencyKey: key)
            #expect(waiting.status == .conflict)
            #expect(try api.decode(APIErrorBody.self, waiting).error.code == .requestInProgress)
            #expect(waiting.headers[.retryAfter] == "1")
            #expect(try await api.repository.shares(patientID: alice.id).isEmpty)
            // The first try's server died with it: after the abandon time, a retry runs the request.
            api.harness.clock.advance(by: IdempotencyKeys.abandonedAfter + 1)
            let taken = try await api.send(.post, Routes.shares, token: alice.token, rawBody: body, idempotencyKey: key)
            #expect(taken.status == .created)
            #expect(try await api.repository.shares(patientID: alice.id).count == 1)
            // The abandoned try, were it still running, can neither keep its answer nor release the new claim.
            #expect(try await api.repository.answerIdempotencyKey(keys.id, claim: firstClaim, status: 201, sealed: [1, 2, 3]) == false)
            try await api.repository.releaseIdempotencyKey(keys.id, claim: firstClaim)
            let again = try await api.send(.post, Routes.shares, token: alice.token, rawBody: body, idempotencyKey: key)
            #expect(again.headers[Self.replayed] == "true")
            #expect(Array(again.body.readableBytesView) == Array(taken.body.readableBytesView))
        }
    }

    /// Whoever holds the database reads no session token from a kept login answer, and an answer edited
    /// or moved to another status is never sent.
    @Test(arguments: Backend.allCases)
    func aKeptAnswerIsSealedFromTheDatabase(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            _ = try await api.user("alice", role: .patient, password: "password one")
            let params = try await api.loginParameters("alice")
            let keys = try await PasswordKeys.derive(password: "password one", salt: params.salt, parameters: params.kdf)
            let login = LoginRequest(username: "alice", loginKey: Base64URL.encode(keys.loginKey.copyBytes()))
            let key = Self.key()
            let first = try await api.send(.post, Routes.login, json: login, idempotencyKey: key)
            #expect(first.status == .ok)
            let token = try api.decode(LoginResponse.self, first).token
            let again = try await api.send(.post, Routes.login, json: login, idempotencyKey: key)
            #expect(again.headers[Self.replayed] == "true")
            #expect(try api.decode(LoginResponse.self, again).token == token, "one session, not two")

            let body = Array(try APIClient.encoder.encode(login))
            let stored = StoredAnswerKeys(scope: "open", key: key, body: body)
            let fingerprint = stored.fingerprint(method: "POST", path: Routes.login, body: body)
            let claim = try await api.repository.claimIdempotencyKey(
                stored.id,
                fingerprint: fingerprint,
                now: api.harness.clock.millis,
                abandonedBefore: 0
            )
            guard case let .answered(status, sealed) = claim else {
                Issue.record("the login's answer is not kept: \(claim)")
                return
            }
            #expect(status == 200)
            #expect(Data(sealed).range(of: Data(token.utf8)) == nil, "the token is not in the database")
            #expect(Data(sealed).range(of: Data("alice".utf8)) == nil)
            // The header alone (a proxy's log, say) does not open it: the key also takes the request's body.
            #expect(StoredAnswerKeys(scope: "open", key: key, body: []).open(sealed, status: status) == nil)
            #expect(stored.open(sealed, status: status) != nil)

            // The operator moves the kept answer to another status: it no longer opens, and is not sent.
            try await api.repository.attackerExecutes("UPDATE idempotency_keys SET status = 201")
            let edited = try await api.send(.post, Routes.login, json: login, idempotencyKey: key)
            #expect(edited.status == .internalServerError)
            #expect(String(buffer: edited.body).contains(token) == false)
        }
    }

    @Test(arguments: Backend.allCases)
    func aRetriedAdminApprovalIsAnsweredAsTheFirst(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient)
            let doctor = try await api.user("drbob", role: .doctor)
            let tresor = Tresor.create(ownerID: alice.id, category: "interventions")
            _ = try await api.declareTresor(alice, tresor)
            let share = try await api.requestShare(alice, doctor, tresor)
            let approval = Approval.share(
                id: share.shareID,
                grant: share.grant,
                issuedAt: api.harness.clock.millis,
                sequence: try await api.nextSequence(),
                adminKey: api.admin
            )
            let key = Self.key()
            let path = Routes.adminApproveShare(share.shareID.uuidString)
            let body = ApproveShareRequest(approval: approval)
            let (first, _) = try await api.adminSend(.post, path, json: body, idempotencyKey: key)
            #expect(first.status == .ok)
            // Each try is signed anew (a signature is accepted once); the key makes it the same request.
            let (again, _) = try await api.adminSend(.post, path, json: body, idempotencyKey: key)
            #expect(again.status == .ok)
            #expect(again.headers[Self.replayed] == "true")
            #expect(Array(again.body.readableBytesView) == Array(first.body.readableBytesView))
            let (unkeyed, _) = try await api.adminSend(.post, path, json: body)
            #expect(unkeyed.status == .conflict, "without the key the retry is refused, as before")
            let audit = try await api.repository.auditEntries(after: 0, limit: 1_000, patientID: nil)
            #expect(audit.filter { $0.action == "share.approved" }.count == 1)
        }
    }

    /// Keys are kept for `IdempotencyKeys.retention` and purged by the retention service afterwards.
    @Test(arguments: Backend.allCases)
    func keysArePurgedAfterTheirRetention(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let alice = try await api.user("alice", role: .patient)
            let doctor = try await api.user("drbob", role: .doctor)
            let request = try await Self.shareRequest(api, alice, doctor, "interventions")
            let key = Self.key()
            #expect(try await api.send(.post, Routes.shares, json: request, token: alice.token, idempotencyKey: key).status == .created)
            let body = Array(try APIClient.encoder.encode(request))
            let keys = StoredAnswerKeys(scope: "session:" + VaultService.tokenHash(alice.token), key: key, body: body)
            let fingerprint = keys.fingerprint(method: "POST", path: Routes.shares, body: body)
            let early = try await api.repository.purgeExpired(now: api.harness.clock.millis, adminSignaturesBefore: 0, batch: 100)
            #expect(early.idempotencyKeys == 0)
            let now = api.harness.clock.millis
            guard
                case .answered(status: 201, _) = try await api.repository.claimIdempotencyKey(
                    keys.id,
                    fingerprint: fingerprint,
                    now: now,
                    abandonedBefore: 0
                )
            else {
                Issue.record("the answer is not kept")
                return
            }
            let later = now + IdempotencyKeys.retention + 1
            let purged = try await api.repository.purgeExpired(now: later, adminSignaturesBefore: 0, batch: 100)
            #expect(purged.idempotencyKeys == 1)
            // Forgotten: the key is new again.
            guard case .claimed = try await api.repository.claimIdempotencyKey(keys.id, fingerprint: fingerprint, now: later, abandonedBefore: 0)
            else {
                Issue.record("the purged key is not new again")
                return
            }
        }
    }
}
