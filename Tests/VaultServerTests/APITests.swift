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

@Suite("API: accounts and admin")
struct AccountAPITests {
    @Test(arguments: Backend.allCases)
    func healthAnswers(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let r = try await api.send(.get, Routes.health)
            #expect(r.status == .ok)
            #expect(try api.decode(HealthResponse.self, r).database == backend.rawValue)
        }
    }

    @Test(arguments: Backend.allCases)
    func registerIsPendingUntilApprovedAndIdempotent(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (identity, reg, first) = try await api.register("Alice", role: .patient, password: "pw-alice")
            #expect(first.status == .accepted)
            #expect(try api.decode(RegisterResponse.self, first) == RegisterResponse(userID: identity.userID, status: .pending))
            let again = try await api.send(.post, Routes.register, json: reg)
            #expect(again.status == .ok, "the same registration twice is idempotent")
            let (_, _, taken) = try await api.register("ALICE", role: .doctor)
            #expect(taken.status == .conflict && api.errorCode(taken) == .conflict, "usernames are unique case-insensitively")

            let pending = try await api.login("alice", password: "pw-alice")
            #expect(pending.status == .forbidden && api.errorCode(pending) == .pendingApproval)
            let wrong = try await api.login("alice", password: "not-it")
            #expect(wrong.status == .unauthorized && api.errorCode(wrong) == .invalidCredentials)

            let (cert, approved) = try await api.approve(reg)
            #expect(approved.status == .ok)
            let login = try await api.login("alice", password: "pw-alice")
            #expect(login.status == .ok)
            let session = try api.decode(LoginResponse.self, login)
            try session.certificate.verify(adminKey: api.admin.publicKey, userID: identity.userID, role: .patient)
            #expect(session.certificate == cert)
            let (restored, _) = try await session.keyBundle.open(password: "pw-alice")
            #expect(restored.signing.publicKey == identity.signing.publicKey, "a new device gets the same keys")

            // Sessions are revocable.
            #expect(try await api.send(.get, Routes.me, token: session.token).status == .ok)
            #expect(try await api.send(.post, Routes.logout, token: session.token).status == .noContent)
            #expect(try await api.send(.get, Routes.me, token: session.token).status == .unauthorized)
        }
    }

    @Test(arguments: Backend.allCases)
    func unknownUsernamesGetStableFakeParameters(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let a = try await api.loginParameters("nobody")
            let b = try await api.loginParameters("NOBODY")
            let c = try await api.loginParameters("someone")
            #expect(a == b, "stable for one name")
            #expect(a.salt != c.salt, "different per name, like real salts")
            #expect(a.kdf == .moderate)
            let r = try await api.wrongLogin("nobody")
            #expect(r.status == .unauthorized && api.errorCode(r) == .invalidCredentials, "same answer as a wrong password")
        }
    }

    @Test(arguments: Backend.allCases)
    func failedLoginsAreRateLimited(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            _ = try await api.user("bob", role: .patient, password: "right")
            let bad = LoginRequest(username: "bob", loginKey: Base64URL.encode(RandomBytes.bytes(count: 32)))
            // Bob logged in from this address, so only the address's back-off applies: 10 free failures.
            let free = LoginRateLimiter.Limits().freeAddressFailures
            for _ in 0...free { #expect(try await api.send(.post, Routes.login, json: bad).status == .unauthorized) }
            let limited = try await api.send(.post, Routes.login, json: bad)
            #expect(limited.status == .tooManyRequests && api.errorCode(limited) == .rateLimited)
            #expect(limited.headers[.retryAfter] == "1")
            #expect(try await api.login("bob", password: "right").status == .tooManyRequests, "even the right password waits")
            api.harness.clock.advance(by: 1_000)
            #expect(try await api.login("bob", password: "right").status == .ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func adminRequestsMustBeSignedFreshAndUnique(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            #expect(try await api.send(.get, Routes.adminPending).status == .unauthorized)
            let (other, _) = try await api.adminSend(.get, Routes.adminPending, key: .generate())
            #expect(other.status == .unauthorized && api.errorCode(other) == .invalidSignature)
            let (stale, _) = try await api.adminSend(.get, Routes.adminPending, timestamp: api.harness.clock.millis - 10 * 60 * 1000)
            #expect(stale.status == .unauthorized)
            let (ok, signed) = try await api.adminSend(.get, Routes.adminPending)
            #expect(ok.status == .ok)
            let (replayed, _) = try await api.adminSend(.get, Routes.adminPending, reuse: signed)
            #expect(replayed.status == .unauthorized, "a signed admin request works once")
            // A signature for one path does not work on another.
            let (moved, _) = try await api.adminSend(
                .get,
                Routes.adminUsers,
                reuse: AdminRequestSignature.sign(
                    method: "GET",
                    pathAndQuery: Routes.adminPending,
                    body: [],
                    timestamp: api.harness.clock.millis,
                    deploymentID: try await api.deploymentID(),
                    adminKey: api.admin
                )
            )
            #expect(moved.status == .unauthorized)
            // Users and audit are there for the admin.
            #expect(try await api.adminSend(.get, Routes.adminUsers).0.status == .ok)
            let verify = try await api.adminSend(.get, Routes.adminAuditVerify).0
            #expect(try api.decode(AuditVerification.self, verify).ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func forgedOrMismatchedRegistrationApprovalsAreRefused(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (_, reg, _) = try await api.register("carol", role: .patient)
            let seq = try await api.nextSequence()
            // A certificate and approval signed by someone other than the admin (a server-side forger).
            let rogue = SigningKeyPair.generate()
            let fakeCert = try Certificate.issue(
                userID: reg.userID,
                username: reg.username,
                role: .patient,
                signingKey: reg.signingKey,
                boxKey: reg.boxKey,
                issuedAt: 1,
                adminKey: rogue
            )
            let r1 = try await api.approveRegistration(reg.userID, fakeCert, sequence: seq, key: rogue)
            #expect(r1.status == .badRequest && api.errorCode(r1) == .invalidApproval)
            // A genuine admin certificate for substituted keys.
            let swapped = try Certificate.issue(
                userID: reg.userID,
                username: reg.username,
                role: .patient,
                signingKey: SigningKeyPair.generate().publicKey,
                boxKey: reg.boxKey,
                issuedAt: 1,
                adminKey: api.admin
            )
            let r2 = try await api.approveRegistration(reg.userID, swapped, sequence: seq)
            #expect(r2.status == .badRequest && api.errorCode(r2) == .invalidApproval)
            // A role the user did not ask for.
            let promoted = try Certificate.issue(
                userID: reg.userID,
                username: reg.username,
                role: .doctor,
                signingKey: reg.signingKey,
                boxKey: reg.boxKey,
                issuedAt: 1,
                adminKey: api.admin
            )
            let r3 = try await api.approveRegistration(reg.userID, promoted, sequence: seq)
            #expect(r3.status == .badRequest)
            #expect(try await api.repository.user(id: reg.userID)?.status == .pending, "nothing was approved")
            // Rejection with a reason ends it.
            let (rej, _) = try await api.adminSend(
                .post,
                Routes.adminRejectRegistration(reg.userID.uuidString),
                json: RejectRequest(reason: "unknown person")
            )
            #expect(rej.status == .ok)
            let login = try await api.login("carol", password: "correct horse")
            #expect(login.status == .forbidden && api.errorCode(login) == .accountRejected)
        }
    }
}
