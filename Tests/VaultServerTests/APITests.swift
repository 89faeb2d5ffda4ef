import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultTestSupport
import VaultAPI
import VaultCrypto
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
            let (restored, _) = try session.keyBundle.open(password: "pw-alice")
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
            let a = try api.decode(LoginParametersResponse.self, try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: "nobody")))
            let b = try api.decode(LoginParametersResponse.self, try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: "NOBODY")))
            let c = try api.decode(LoginParametersResponse.self, try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: "someone")))
            #expect(a == b, "stable for one name")
            #expect(a.salt != c.salt, "different per name, like real salts")
            #expect(a.kdf == .moderate)
            let r = try await api.send(.post, Routes.login, json: LoginRequest(username: "nobody", loginKey: Base64URL.encode(RandomBytes.bytes(count: 32))))
            #expect(r.status == .unauthorized && api.errorCode(r) == .invalidCredentials, "same answer as a wrong password")
        }
    }

    @Test(arguments: Backend.allCases)
    func failedLoginsAreRateLimited(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            _ = try await api.user("bob", role: .patient, password: "right")
            let bad = LoginRequest(username: "bob", loginKey: Base64URL.encode(RandomBytes.bytes(count: 32)))
            for _ in 0..<10 { #expect(try await api.send(.post, Routes.login, json: bad).status == .unauthorized) }
            let limited = try await api.send(.post, Routes.login, json: bad)
            #expect(limited.status == .tooManyRequests && api.errorCode(limited) == .rateLimited)
            #expect(limited.headers[.retryAfter] != nil)
            #expect(try await api.login("bob", password: "right").status == .tooManyRequests, "even the right password waits")
            api.harness.clock.advance(by: 16 * 60 * 1000)
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
            let (moved, _) = try await api.adminSend(.get, Routes.adminUsers, reuse: AdminRequestSignature.sign(
                method: "GET", pathAndQuery: Routes.adminPending, body: [], timestamp: api.harness.clock.millis, adminKey: api.admin))
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
            let fakeCert = try Certificate.issue(userID: reg.userID, username: reg.username, role: .patient, signingKey: reg.signingKey,
                                                 boxKey: reg.boxKey, issuedAt: 1, adminKey: rogue)
            let fake = ApproveRegistrationRequest(certificate: fakeCert, approval: .registration(fakeCert, issuedAt: 1, sequence: seq, adminKey: rogue))
            let (r1, _) = try await api.adminSend(.post, Routes.adminApproveRegistration(reg.userID.uuidString), json: fake)
            #expect(r1.status == .badRequest && api.errorCode(r1) == .invalidApproval)
            // A genuine admin certificate for substituted keys.
            let swapped = try Certificate.issue(userID: reg.userID, username: reg.username, role: .patient, signingKey: SigningKeyPair.generate().publicKey,
                                                boxKey: reg.boxKey, issuedAt: 1, adminKey: api.admin)
            let (r2, _) = try await api.adminSend(.post, Routes.adminApproveRegistration(reg.userID.uuidString),
                                                  json: ApproveRegistrationRequest(certificate: swapped, approval: .registration(swapped, issuedAt: 1, sequence: seq, adminKey: api.admin)))
            #expect(r2.status == .badRequest && api.errorCode(r2) == .invalidApproval)
            // A role the user did not ask for.
            let promoted = try Certificate.issue(userID: reg.userID, username: reg.username, role: .doctor, signingKey: reg.signingKey,
                                                 boxKey: reg.boxKey, issuedAt: 1, adminKey: api.admin)
            let (r3, _) = try await api.adminSend(.post, Routes.adminApproveRegistration(reg.userID.uuidString),
                                                  json: ApproveRegistrationRequest(certificate: promoted, approval: .registration(promoted, issuedAt: 1, sequence: seq, adminKey: api.admin)))
            #expect(r3.status == .badRequest)
            #expect(try await api.repository.user(id: reg.userID)?.status == .pending, "nothing was approved")
            // Rejection with a reason ends it.
            let (rej, _) = try await api.adminSend(.post, Routes.adminRejectRegistration(reg.userID.uuidString), json: RejectRequest(reason: "unknown person"))
            #expect(rej.status == .ok)
            let login = try await api.login("carol", password: "correct horse")
            #expect(login.status == .forbidden && api.errorCode(login) == .accountRejected)
        }
    }
}

@Suite("API: shares and records")
struct ShareAPITests {
    @Test(arguments: Backend.allCases)
    func fullShareLifecycleWithRealCiphertext(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let doctor = try await api.user("doc", role: .doctor)
            let interventions = Tresor.create(ownerID: patient.id, category: "interventions")
            let assessments = Tresor.create(ownerID: patient.id, category: "assessments")
            #expect(try await api.declareTresor(patient, interventions).status == .ok)
            #expect(try await api.declareTresor(patient, assessments).status == .ok)

            let (pushed, result) = try await api.push(patient, [try api.envelope(patient, interventions, record: "walk", payload: "walk 30 min"),
                                                                try api.envelope(patient, assessments, record: "pain", payload: "pain 3/10")])
            #expect(pushed.status == .ok)
            #expect(result?.results.map(\.status) == [.stored, .stored])

            let share = try await api.requestShare(patient, doctor, interventions)
            #expect(share.state == .pending)
            let early = try await api.pull(doctor.token, owner: patient.id, tresor: interventions.id)
            #expect(early.status == .forbidden, "no access before the admin approves")
            #expect(try await api.approveShare(share).status == .ok)

            // The doctor lists the patient, pulls the shared category and decrypts it with the granted keys.
            let patients = try api.decode(PatientList.self, try await api.send(.get, Routes.doctorPatients, token: doctor.token))
            #expect(patients.patients.map(\.username) == ["pat"] && patients.patients[0].categories == ["interventions"])
            let shares = try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: doctor.token)).shares
            let activeShare = try #require(shares.first { $0.state == .active })
            try activeShare.approval!.verifyShare(adminKey: api.admin.publicKey, shareID: activeShare.shareID, grant: activeShare.grant)
            let keys = try activeShare.grant.openKeys(member: doctor.identity, patient: patient.certificate, adminKey: api.admin.publicKey)
            let page = try api.decode(PullResponse.self, try await api.pull(doctor.token, owner: patient.id, tresor: interventions.id))
            #expect(page.changes.count == 1 && page.done)
            let plain = try page.changes[0].envelope.open(keys: keys.keys, authorKey: patient.certificate.signingKey,
                                                           expecting: EnvelopeContext(ownerID: patient.id, tresorID: interventions.id, category: "interventions"))
            #expect(String(decoding: plain, as: UTF8.self) == "walk 30 min")
            // The other category stays closed: the server refuses, and the keys would not open it anyway.
            #expect(try await api.pull(doctor.token, owner: patient.id, tresor: assessments.id).status == .forbidden)

            // The patient sees who read what.
            let log = try api.decode(AuditPage.self, try await api.send(.get, Routes.accessLog, token: patient.token))
            #expect(log.entries.contains { $0.action == "records.read" && $0.details["doctor"] == "doc" && $0.details["count"] == "1" })

            // Revocation is immediate.
            let revoked = try await api.send(.post, Routes.shareRevoke(share.shareID.uuidString), token: patient.token)
            #expect(try api.decode(ShareInfo.self, revoked).state == .revoked)
            let after = try await api.pull(doctor.token, owner: patient.id, tresor: interventions.id)
            #expect(after.status == .forbidden && api.errorCode(after) == .shareNotActive)
            #expect(try api.decode(PatientList.self, try await api.send(.get, Routes.doctorPatients, token: doctor.token)).patients.isEmpty)
            #expect(try await api.send(.post, Routes.shareRevoke(share.shareID.uuidString), token: patient.token).status == .conflict)
        }
    }

    @Test(arguments: Backend.allCases)
    func approvalsCannotBeForgedOrReplayedOntoAnotherShare(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let doctor = try await api.user("doc", role: .doctor)
            let a = Tresor.create(ownerID: patient.id, category: "interventions"), b = Tresor.create(ownerID: patient.id, category: "assessments")
            _ = try await api.declareTresor(patient, a)
            _ = try await api.declareTresor(patient, b)
            let shareA = try await api.requestShare(patient, doctor, a)
            let shareB = try await api.requestShare(patient, doctor, b)
            #expect(try await api.approveShare(shareA).status == .ok)

            // Replay A's approval onto B.
            let approvalA = try #require(try await api.repository.share(id: shareA.shareID)?.approval)
            let (replayed, _) = try await api.adminSend(.post, Routes.adminApproveShare(shareB.shareID.uuidString), json: ApproveShareRequest(approval: approvalA))
            #expect(replayed.status == .badRequest && api.errorCode(replayed) == .invalidApproval)
            // A forged approval (not the admin's key).
            let forged = Approval.share(id: shareB.shareID, grant: shareB.grant, issuedAt: 1, sequence: 999, adminKey: .generate())
            let (f, _) = try await api.adminSend(.post, Routes.adminApproveShare(shareB.shareID.uuidString), json: ApproveShareRequest(approval: forged))
            #expect(f.status == .badRequest && api.errorCode(f) == .invalidApproval)
            // A genuine approval with a stale sequence number.
            let stale = Approval.share(id: shareB.shareID, grant: shareB.grant, issuedAt: 1, sequence: 1, adminKey: api.admin)
            let (s, _) = try await api.adminSend(.post, Routes.adminApproveShare(shareB.shareID.uuidString), json: ApproveShareRequest(approval: stale))
            #expect(s.status == .conflict)
            #expect(try await api.repository.share(id: shareB.shareID)?.state == .pending)
            let (rej, _) = try await api.adminSend(.post, Routes.adminRejectShare(shareB.shareID.uuidString), json: RejectRequest(reason: "not needed"))
            #expect(try api.decode(ShareInfo.self, rej).state == .rejected)
            #expect(try await api.approveShare(shareB).status == .conflict, "a rejected share stays rejected")
        }
    }

    @Test(arguments: Backend.allCases)
    func expiredShareEndsAccess(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let doctor = try await api.user("doc", role: .doctor)
            let t = Tresor.create(ownerID: patient.id, category: "interventions")
            _ = try await api.declareTresor(patient, t)
            let share = try await api.requestShare(patient, doctor, t, expiresAt: api.harness.clock.millis + 60_000)
            _ = try await api.approveShare(share)
            #expect(try await api.pull(doctor.token, owner: patient.id, tresor: t.id).status == .ok)
            api.harness.clock.advance(by: 61_000)
            let r = try await api.pull(doctor.token, owner: patient.id, tresor: t.id)
            #expect(r.status == .forbidden && api.errorCode(r) == .shareNotActive)
            #expect(try await api.repository.share(id: share.shareID)?.state == .expired)
        }
    }

    @Test(arguments: Backend.allCases)
    func refusalsForSessionRoleAndOwnership(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let other = try await api.user("pat2", role: .patient)
            let doctor = try await api.user("doc", role: .doctor)
            let t = Tresor.create(ownerID: patient.id, category: "interventions")
            _ = try await api.declareTresor(patient, t)

            for (method, path) in [(HTTPRequest.Method.get, Routes.records), (.post, Routes.records), (.get, Routes.shares), (.get, Routes.doctorPatients),
                                   (.get, Routes.tresors), (.get, Routes.accessLog), (.get, Routes.userByName("pat"))] {
                let r = try await api.send(method, path, json: method == .post ? PushRequest(envelopes: []) : nil)
                #expect(r.status == .unauthorized && api.errorCode(r) == .unauthorized, "\(path) without a session")
            }
            #expect(try await api.send(.get, Routes.records, token: "bogus").status == .unauthorized)
            // Wrong role.
            #expect(try await api.push(doctor, [try api.envelope(patient, t, record: "x", payload: "x")]).0.status == .forbidden)
            #expect(try await api.send(.get, Routes.doctorPatients, token: patient.token).status == .forbidden)
            #expect(try await api.send(.get, Routes.tresors, token: doctor.token).status == .forbidden)
            // A patient reading another patient.
            #expect(try await api.pull(other.token, owner: patient.id, tresor: t.id).status == .forbidden)
            // A doctor with no share at all, and without naming a tresor.
            #expect(try await api.pull(doctor.token, owner: patient.id, tresor: t.id).status == .forbidden)
            #expect(try await api.pull(doctor.token, owner: patient.id).status == .badRequest)
            // A patient cannot share someone else's tresor or use a grant signed by another patient.
            let forgedGrant = try Grant.make(patient: other.identity, member: doctor.certificate, adminKey: api.admin.publicKey,
                                             tresor: Tresor.create(ownerID: other.id, category: "interventions"), createdAt: 1)
            #expect(try await api.send(.post, Routes.shares, json: CreateShareRequest(grant: forgedGrant), token: patient.token).status == .forbidden)
            // Sharing with a non-doctor is refused.
            let toPatient = try Grant.make(patient: patient.identity, member: other.certificate, adminKey: api.admin.publicKey, tresor: t, createdAt: 1)
            #expect(try await api.send(.post, Routes.shares, json: CreateShareRequest(grant: toPatient), token: patient.token).status == .badRequest)
            // The directory answers for approved users only.
            #expect(try api.decode(DirectoryEntry.self, try await api.send(.get, Routes.userByName("DOC"), token: patient.token)).certificate == doctor.certificate)
            #expect(try await api.send(.get, Routes.userByName("ghost"), token: patient.token).status == .notFound)
            #expect(try await api.send(.get, Routes.userByID(doctor.id.uuidString), token: patient.token).status == .ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func pushChecksEveryEnvelope(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let other = try await api.user("pat2", role: .patient)
            let t = Tresor.create(ownerID: patient.id, category: "interventions")
            _ = try await api.declareTresor(patient, t)
            let now = UInt64(api.harness.clock.millis)

            let good = try api.envelope(patient, t, record: "a", payload: "ok")
            let byOther = try api.envelope(patient, t, record: "b", payload: "forged", signer: other.identity.signing)
            let otherOwner = try api.envelope(other, Tresor.create(ownerID: other.id, category: "interventions"), record: "c", payload: "x")
            let twoHoursAhead = try api.envelope(patient, t, record: "d", payload: "ahead", physicalMs: now + 2 * 3_600_000)
            let farFuture = try api.envelope(patient, t, record: "e", payload: "future", physicalMs: now + 400 * 86_400_000)
            let unknownTresor = try api.envelope(patient, Tresor.create(ownerID: patient.id, category: "sleep"), record: "f", payload: "x")
            var flipped = try api.envelope(patient, t, record: "g", payload: "x")
            flipped.header.deleted = true

            let (r, result) = try await api.push(patient, [good, byOther, otherOwner, twoHoursAhead, farFuture, unknownTresor, flipped, good])
            #expect(r.status == .ok)
            let results = try #require(result?.results)
            #expect(results.map(\.status) == [.stored, .rejected, .rejected, .stored, .rejected, .rejected, .rejected, .duplicate])
            #expect(results[1].code == .invalidSignature)
            #expect(results[2].code == .forbidden)
            #expect(results[4].code == .clockSkew)
            #expect(results[6].code == .invalidSignature, "a flipped delete flag breaks the signature")
            #expect(results[0].sequence == 1 && results[3].sequence == 2)
            // Pushing the same batch again changes nothing.
            let (_, again) = try await api.push(patient, [good, twoHoursAhead])
            #expect(again?.results.map(\.status) == [.duplicate, .duplicate])
            let page = try api.decode(PullResponse.self, try await api.pull(patient.token))
            #expect(page.changes.map(\.sequence) == [1, 2] && page.nextCursor == 2 && page.done)
            #expect(page.changes[0].envelope == good)
        }
    }

    @Test(arguments: Backend.allCases)
    func pullPagesWithCursor(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let t = Tresor.create(ownerID: patient.id, category: "interventions")
            _ = try await api.declareTresor(patient, t)
            let envelopes = try (0..<25).map { try api.envelope(patient, t, record: "r\($0)", payload: "v\($0)") }
            _ = try await api.push(patient, envelopes)
            var cursor: UInt64 = 0, seen: [Envelope] = [], pages = 0
            while true {
                let page = try api.decode(PullResponse.self, try await api.pull(patient.token, since: cursor, limit: 10))
                seen += page.changes.map(\.envelope)
                cursor = page.nextCursor
                pages += 1
                if page.done { break }
            }
            #expect(pages == 3 && seen == envelopes)
        }
    }
}

@Suite("API: bad input gets a 4xx and a JSON error")
struct BadInputTests {
    @Test func malformedInputIsRefusedWithClearErrors() async throws {
        try await APIHarness.run(.sqlite) { api in
            let cases: [(String, [UInt8], String?, HTTPResponse.Status, APIErrorCode)] = [
                ("malformed JSON", Array("{\"username\":".utf8), "application/json", .badRequest, .invalidJSON),
                ("empty body", [], "application/json", .badRequest, .invalidJSON),
                ("wrong type", Array(#"{"username": 42}"#.utf8), "application/json", .badRequest, .invalidJSON),
                ("wrong content type", Array(#"{"username":"a"}"#.utf8), "text/plain", .unsupportedMediaType, .unsupportedMediaType),
                ("no content type", Array(#"{"username":"a"}"#.utf8), nil, .unsupportedMediaType, .unsupportedMediaType),
            ]
            for (name, body, type, status, code) in cases {
                let r = try await api.send(.post, Routes.loginParameters, rawBody: body, contentType: type)
                #expect(r.status == status, "\(name)")
                #expect(api.errorCode(r) == code, "\(name)")
            }
            // Bad base64 inside a registration is a 400 naming the field, not a crash or a 500.
            let (_, reg, _) = try await api.register("dave", role: .patient)
            var json = try JSONSerialization.jsonObject(with: APIClient.encoder.encode(reg)) as! [String: Any]
            json["signingKey"] = "not*base64"
            let r = try await api.send(.post, Routes.register, rawBody: Array(try JSONSerialization.data(withJSONObject: json)))
            #expect(r.status == .badRequest && api.errorCode(r) == .invalidJSON)
            let message = try api.decode(APIErrorBody.self, r).error.message
            #expect(message.contains("signingKey"))
            // Too large.
            let big = try await api.send(.post, Routes.loginParameters, rawBody: [UInt8](repeating: 0x20, count: APILimits.maxBodyBytes + 1))
            #expect(big.status == .contentTooLarge && api.errorCode(big) == .payloadTooLarge)
            // Unknown routes and malformed path parameters.
            let missing = try await api.send(.get, "/v1/nope")
            #expect(missing.status == .notFound && api.errorCode(missing) == .notFound)
            let user = try await api.user("erin", role: .patient)
            #expect(try await api.send(.post, Routes.shareRevoke("not-a-uuid"), token: user.token).status == .badRequest)
            #expect(try await api.send(.get, Routes.records + "?since=-1", token: user.token).status == .badRequest)
            // No error body ever carries internals.
            for r in [missing, big] {
                let text = String(decoding: r.body.readableBytesView, as: UTF8.self)
                #expect(!text.contains("Error(") && !text.contains(".swift"))
            }
        }
    }
}

@Suite("API: hostile inputs found in review")
struct HostileInputTests {
    @Test func adminTimestampAtTheEdgesOfInt64DoesNotCrash() async throws {
        try await APIHarness.run(.sqlite) { api in
            for ts in [Int64.min + 1, Int64.min, Int64.max, -9_223_372_036_854_775_000] {
                var headers: HTTPFields = [.contentType: "application/json"]
                headers[HTTPField.Name(AdminRequestSignature.timestampHeader)!] = String(ts)
                headers[HTTPField.Name(AdminRequestSignature.nonceHeader)!] = Base64URL.encode(RandomBytes.bytes(count: 16))
                headers[HTTPField.Name(AdminRequestSignature.signatureHeader)!] = Base64URL.encode(RandomBytes.bytes(count: 64))
                let r = try await api.client.execute(uri: Routes.adminPending, method: .get, headers: headers)
                #expect(r.status == .unauthorized, "timestamp \(ts)")
            }
        }
    }

    @Test func selfGrantWithEpochZeroIsABadRequest() async throws {
        try await APIHarness.run(.sqlite) { api in
            let patient = try await api.user("pat", role: .patient)
            var grant = try Grant.make(patient: patient.identity, member: patient.certificate, adminKey: api.admin.publicKey,
                                       tresor: Tresor.create(ownerID: patient.id, category: "interventions"), createdAt: 1)
            for epochs: [UInt32] in [[0], [UInt32.max], [1, 3], [2]] {
                grant.epochs = epochs
                grant.signature = patient.identity.signing.sign(grant.statementBytes)
                let r = try await api.send(.put, Routes.tresors, json: PutTresorRequest(selfGrant: grant), token: patient.token)
                #expect(r.status == .badRequest, "epochs \(epochs)")
            }
        }
    }

    @Test func cursorsBeyondInt64AreRefused() async throws {
        try await APIHarness.run(.sqlite) { api in
            let patient = try await api.user("pat", role: .patient)
            for path in [Routes.accessLog + "?after=18446744073709551615", Routes.records + "?since=18446744073709551615",
                         Routes.accessLog + "?after=9223372036854775808"] {
                #expect(try await api.send(.get, path, token: patient.token).status == .badRequest, "\(path)")
            }
            #expect(try await api.send(.get, Routes.accessLog + "?after=9223372036854775807", token: patient.token).status == .ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func rotatedGrantKeepsTheApprovedGrantAndItsExpiry(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let doctor = try await api.user("doc", role: .doctor)
            var tresor = Tresor.create(ownerID: patient.id, category: "interventions")
            _ = try await api.declareTresor(patient, tresor)
            let share = try await api.requestShare(patient, doctor, tresor, expiresAt: api.harness.clock.millis + 3_600_000)
            // Before approval the doctor is not even shown the grant (it carries sealed keys).
            #expect(try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: doctor.token)).shares.isEmpty)
            _ = try await api.approveShare(share)

            tresor.rotate()
            #expect(try await api.declareTresor(patient, tresor).status == .ok)
            let longer = try Grant.make(patient: patient.identity, member: doctor.certificate, adminKey: api.admin.publicKey, tresor: tresor,
                                        createdAt: api.harness.clock.millis, expiresAt: api.harness.clock.millis + 99_000_000)
            let refused = try await api.send(.put, Routes.shareGrant(share.shareID.uuidString), json: UpdateShareGrantRequest(grant: longer), token: patient.token)
            #expect(refused.status == .badRequest, "the expiry cannot be extended without the admin")
            let rotated = try Grant.make(patient: patient.identity, member: doctor.certificate, adminKey: api.admin.publicKey, tresor: tresor,
                                         createdAt: api.harness.clock.millis, expiresAt: share.grant.expiresAt)
            let ok = try await api.send(.put, Routes.shareGrant(share.shareID.uuidString), json: UpdateShareGrantRequest(grant: rotated), token: patient.token)
            #expect(ok.status == .ok)
            let seen = try #require(try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: doctor.token)).shares.first)
            #expect(seen.grant == share.grant, "the approved grant is kept")
            #expect(seen.latestGrant?.epochs == [1, 2])
            try seen.approval!.verifyShare(adminKey: api.admin.publicKey, shareID: seen.shareID, grant: seen.grant)
        }
    }
}
