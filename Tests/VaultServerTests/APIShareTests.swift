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

            let (pushed, result) = try await api.push(
                patient,
                [
                    try api.envelope(patient, interventions, record: "walk", payload: "walk 30 min"),
                    try api.envelope(patient, assessments, record: "pain", payload: "pain 3/10"),
                ]
            )
            #expect(pushed.status == .ok)
            #expect(result?.results.map(\.status) == [.stored, .stored])

            let share = try await api.requestShare(patient, doctor, interventions)
            #expect(share.state == .pending)
            let early = try await api.pull(doctor.token, owner: patient.id, tresor: interventions.id)
            #expect(early.status == .forbidden, "no access before the admin approves")
            #expect(try await api.approveShare(share).status == .ok)
            #expect(try await api.deliverKeys(patient, doctor, share, interventions).status == .ok)

            // The doctor lists the patient, pulls the shared category and decrypts it with the granted keys.
            let patients = try api.decode(PatientList.self, try await api.send(.get, Routes.doctorPatients, token: doctor.token))
            #expect(patients.patients.map(\.username) == ["pat"] && patients.patients[0].categories == ["interventions"])
            let shares = try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: doctor.token)).shares
            let activeShare = try #require(shares.first { $0.state == .active })
            try activeShare.approval!.verifyShare(adminKey: api.admin.publicKey, shareID: activeShare.shareID, grant: activeShare.grant)
            #expect(activeShare.grant.isRequest, "the approved request carries no keys")
            let delivered = try #require(activeShare.latestGrant)
            #expect(delivered.isSuccessor(of: activeShare.grant))
            let keys = try delivered.openKeys(member: doctor.identity, patient: patient.certificate, adminKey: api.admin.publicKey)
            let page = try api.page(try await api.pull(doctor.token, owner: patient.id, tresor: interventions.id))
            #expect(page.changes.count == 1 && page.done)
            let context = EnvelopeContext(ownerID: patient.id, tresorID: interventions.id, category: "interventions")
            let plain = try page.changes[0].envelope.open(keys: keys.keys, authorKey: patient.certificate.signingKey, expecting: context)
            #expect(String(decoding: plain, as: UTF8.self) == "walk 30 min")
            // The other category stays closed: the server refuses, and the keys would not open it anyway.
            #expect(try await api.pull(doctor.token, owner: patient.id, tresor: assessments.id).status == .forbidden)

            // The patient sees who read what.
            let log = try api.decode(AuditPage.self, try await api.send(.get, Routes.accessLog, token: patient.token))
            #expect(log.entries.contains { $0.action == "records.read" && $0.details["doctor"] == "doc" && $0.details["count"] == "1" })

            // Revocation is immediate, and needs the patient's signed statement: no body, or a body that is not
            // a revocation, is refused (Docs/design.md §8).
            let path = Routes.shareRevoke(share.shareID.uuidString)
            let empty = try await api.send(.post, path, token: patient.token)
            #expect(empty.status == .badRequest && api.errorCode(empty) == .invalidJSON)
            let wrong = try await api.send(.post, path, json: ["revocation": "yes"], token: patient.token)
            #expect(wrong.status == .badRequest && api.errorCode(wrong) == .invalidJSON)
            #expect(try await api.pull(doctor.token, owner: patient.id, tresor: interventions.id).status == .ok, "still active")
            let revocation = ShareRevocation.make(shareID: share.shareID, request: share.grant, patient: patient.identity, revokedAt: 1)
            let revoked = try await api.send(.post, path, json: RevokeShareRequest(revocation: revocation), token: patient.token)
            #expect(try api.decode(ShareInfo.self, revoked).state == .revoked)
            #expect(try api.decode(ShareInfo.self, revoked).revocation == revocation)
            let after = try await api.pull(doctor.token, owner: patient.id, tresor: interventions.id)
            #expect(after.status == .forbidden && api.errorCode(after) == .shareNotActive)
            #expect(try api.decode(PatientList.self, try await api.send(.get, Routes.doctorPatients, token: doctor.token)).patients.isEmpty)
            let again = try await api.send(.post, path, json: RevokeShareRequest(revocation: revocation), token: patient.token)
            #expect(try again.status == .ok && api.decode(ShareInfo.self, again).state == .revoked, "an ended share keeps its state")
        }
    }

    /// A request the patient withdrew before the admin decided, or one the admin rejected, never reaches the
    /// doctor: not in `GET /v1/shares` (with or without `patient`), not in the event stream (EventsTests).
    @Test(arguments: Backend.allCases)
    func aDoctorSeesNoRequestThatWasNeverApproved(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, doctor, a, b) = try await DoctorPatientListTests.patientWithTwoTresors(api)
            let withdrawn = try await api.requestShare(patient, doctor, a)
            let revocation = ShareRevocation.make(shareID: withdrawn.shareID, request: withdrawn.grant, patient: patient.identity, revokedAt: 1)
            let revoked = try await api.send(
                .post,
                Routes.shareRevoke(withdrawn.shareID.uuidString),
                json: RevokeShareRequest(revocation: revocation),
                token: patient.token
            )
            #expect(try api.decode(ShareInfo.self, revoked).state == .revoked)
            let pending = try await api.requestShare(patient, doctor, b)
            for path in [Routes.shares, Routes.shares + "?patient=\(patient.id.uuidString.lowercased())"] {
                let listed = try api.decode(ShareList.self, try await api.send(.get, path, token: doctor.token)).shares
                #expect(listed.isEmpty, "the doctor learns of requests never approved: \(listed.map(\.state))")
            }
            let own = try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: patient.token)).shares
            #expect(Set(own.map(\.shareID)) == [withdrawn.shareID, pending.shareID], "the patient sees both")

            // Approved, then revoked: the doctor sees it, with the patient's revocation.
            #expect(try await api.approveShare(pending).status == .ok)
            let end = ShareRevocation.make(shareID: pending.shareID, request: pending.grant, patient: patient.identity, revokedAt: 2)
            _ = try await api.send(
                .post,
                Routes.shareRevoke(pending.shareID.uuidString),
                json: RevokeShareRequest(revocation: end),
                token: patient.token
            )
            let after = try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: doctor.token)).shares
            #expect(after.map(\.shareID) == [pending.shareID] && after.first?.revocation == end)
        }
    }

    @Test(arguments: Backend.allCases)
    func approvalsCannotBeForgedOrReplayedOntoAnotherShare(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, doctor, a, b) = try await DoctorPatientListTests.patientWithTwoTresors(api)
            let shareA = try await api.requestShare(patient, doctor, a)
            let shareB = try await api.requestShare(patient, doctor, b)
            #expect(try await api.approveShare(shareA).status == .ok)

            // Replay A's approval onto B.
            let approvalA = try #require(try await api.repository.share(id: shareA.shareID)?.approval)
            let replayed = try await api.approveShare(shareB.shareID, with: approvalA)
            #expect(replayed.status == .badRequest && api.errorCode(replayed) == .invalidApproval)
            // A forged approval (not the admin's key).
            let forged = Approval.share(id: shareB.shareID, grant: shareB.grant, issuedAt: 1, sequence: 999, adminKey: .generate())
            let f = try await api.approveShare(shareB.shareID, with: forged)
            #expect(f.status == .badRequest && api.errorCode(f) == .invalidApproval)
            // A genuine approval with a stale sequence number.
            let stale = Approval.share(id: shareB.shareID, grant: shareB.grant, issuedAt: 1, sequence: 1, adminKey: api.admin)
            let s = try await api.approveShare(shareB.shareID, with: stale)
            #expect(s.status == .conflict)
            #expect(try await api.repository.share(id: shareB.shareID)?.state == .pending)
            let (rej, _) = try await api.adminSend(
                .post,
                Routes.adminRejectShare(shareB.shareID.uuidString),
                json: RejectRequest(reason: "not needed")
            )
            #expect(try api.decode(ShareInfo.self, rej).state == .rejected)
            #expect(try await api.approveShare(shareB).status == .conflict, "a rejected share stays rejected")
        }
    }

    /// A patient, a doctor and an approved share of the patient's tresor with the doctor that ends in a minute.
    static func shareEndingInAMinute(_ api: APIClient) async throws -> (TestUser, TestUser, Tresor, ShareInfo) {
        let patient = try await api.user("pat", role: .patient)
        let doctor = try await api.user("doc", role: .doctor)
        let t = Tresor.create(ownerID: patient.id, category: "interventions")
        _ = try await api.declareTresor(patient, t)
        let share = try await api.requestShare(patient, doctor, t, expiresAt: api.harness.clock.millis + 60_000)
        _ = try await api.approveShare(share)
        return (patient, doctor, t, share)
    }

    @Test(arguments: Backend.allCases)
    func expiredShareEndsAccess(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, doctor, t, share) = try await Self.shareEndingInAMinute(api)
            #expect(try await api.pull(doctor.token, owner: patient.id, tresor: t.id).status == .ok)
            api.harness.clock.advance(by: 61_000)
            #expect(try await api.deliverKeys(patient, doctor, share, t).status != .ok, "no keys to an expired share")
            let r = try await api.pull(doctor.token, owner: patient.id, tresor: t.id)
            #expect(r.status == .forbidden && api.errorCode(r) == .shareNotActive)
            #expect(try await api.repository.share(id: share.shareID)?.state == .expired)
        }
    }

    /// The end date is a condition of the access check itself: a share past it lets nobody in even while
    /// its row still says active (nothing has listed or moved it since).
    @Test(arguments: Backend.allCases)
    func shareAtItsEndGivesNoAccessBeforeAnythingExpiresIt(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, doctor, t, share) = try await Self.shareEndingInAMinute(api)
            api.harness.clock.advance(by: 60_000)
            let now = api.harness.clock.millis
            #expect(try await api.repository.share(id: share.shareID)?.state == .active, "nothing has expired it yet")
            #expect(try await api.repository.activeShares(doctorID: doctor.id, now: now).isEmpty)
            #expect(try await api.repository.activeShares(doctorID: doctor.id, now: now - 1).map(\.id) == [share.shareID])
            let r = try await api.pull(doctor.token, owner: patient.id, tresor: t.id)
            #expect(r.status == .forbidden && api.errorCode(r) == .shareNotActive)
            let listed = try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: patient.token))
            #expect(listed.shares.map(\.state) == [.expired], "the listing shows the end, and records it")
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

            for (method, path) in [
                (HTTPRequest.Method.get, Routes.records), (.post, Routes.records), (.get, Routes.shares),
                (.get, Routes.doctorPatients), (.get, Routes.tresors), (.get, Routes.accessLog),
                (.get, Routes.userByName("pat")),
            ] {
                let r = try await api.send(method, path, rawBody: method == .post ? try EnvelopeFrame.encode([]) : nil)
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
            let forgedGrant = try Grant.make(
                patient: other.identity,
                member: doctor.certificate,
                adminKey: api.admin.publicKey,
                tresor: Tresor.create(ownerID: other.id, category: "interventions"),
                createdAt: 1
            )
            #expect(try await api.send(.post, Routes.shares, json: CreateShareRequest(grant: forgedGrant), token: patient.token).status == .forbidden)
            // Sharing with a non-doctor is refused.
            let toPatient = try Grant.make(
                patient: patient.identity,
                member: other.certificate,
                adminKey: api.admin.publicKey,
                tresor: t,
                createdAt: 1
            )
            #expect(try await api.send(.post, Routes.shares, json: CreateShareRequest(grant: toPatient), token: patient.token).status == .badRequest)
            // The directory answers for approved users only.
            let found = try await api.send(.get, Routes.userByName("DOC"), token: patient.token)
            #expect(try api.decode(DirectoryEntry.self, found).certificate == doctor.certificate)
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
            let page = try api.page(try await api.pull(patient.token))
            #expect(page.changes.map(\.sequence) == [1, 2] && page.nextCursor == 2 && page.done)
            #expect(page.changes[0].envelope == good)
        }
    }

    /// A record stays in the tresor it was first written to: a later version of the same record id under
    /// another category is refused, so the first category's readers never lose its versions or tombstone.
    @Test(arguments: Backend.allCases)
    func aRecordNeverMovesToAnotherTresor(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let interventions = Tresor.create(ownerID: patient.id, category: "interventions")
            let assessments = Tresor.create(ownerID: patient.id, category: "assessments")
            _ = try await api.declareTresor(patient, interventions)
            _ = try await api.declareTresor(patient, assessments)
            let now = UInt64(api.harness.clock.millis)
            let first = try api.envelope(patient, interventions, record: "walk", payload: "v1", physicalMs: now)
            let moved = try api.envelope(patient, assessments, record: "walk", payload: "v2", physicalMs: now + 1_000)
            let newer = try api.envelope(patient, interventions, record: "walk", payload: "v3", physicalMs: now + 2_000)
            let (_, stored) = try await api.push(patient, [first])
            #expect(stored?.results.map(\.status) == [.stored])
            let (_, result) = try await api.push(patient, [moved, newer])
            let results = try #require(result?.results)
            #expect(results.map(\.status) == [.rejected, .stored])
            #expect(results[0].code == .conflict)
            let page = try api.page(try await api.pull(patient.token))
            #expect(page.changes.map(\.envelope) == [newer], "the head stays in the first tresor")
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
            var cursor: UInt64 = 0
            var seen: [Envelope] = []
            var pages = 0
            while true {
                let page = try api.page(try await api.pull(patient.token, since: cursor, limit: 10), after: cursor)
                seen += page.changes.map(\.envelope)
                cursor = page.nextCursor
                pages += 1
                if page.done { break }
            }
            #expect(pages == 3 && seen == envelopes)
        }
    }
}

/// The doctor's patient list (`GET /v1/doctor/patients`), read in one statement per page: each patient once,
/// by name, with the categories shared and the newest change among them.
@Suite("API: the doctor's patient list")
struct DoctorPatientListTests {
    /// Declares `category` for `patient`, shares it with `doctor` and approves the share.
    static func share(
        _ api: APIClient,
        _ patient: TestUser,
        _ doctor: TestUser,
        _ category: String,
        expiresAt: UnixMillis? = nil
    ) async throws -> Tresor {
        let t = Tresor.create(ownerID: patient.id, category: category)
        _ = try await api.declareTresor(patient, t)
        let share = try await api.requestShare(patient, doctor, t, expiresAt: expiresAt)
        #expect(try await api.approveShare(share).status == .ok)
        return t
    }

    @Test(arguments: Backend.allCases)
    func eachPatientOnceWithTheNewestChangeOfWhatIsSharedAndNoShareThatEnded(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let doctor = try await api.user("doc", role: .doctor)
            let kira = try await api.user("kira", role: .patient)
            let lena = try await api.user("lena", role: .patient)
            let omar = try await api.user("omar", role: .patient)
            let interventions = try await Self.share(api, kira, doctor, "interventions")
            let assessments = try await Self.share(api, kira, doctor, "assessments")
            // A category of kira's that is not shared: its change must not show.
            let medications = Tresor.create(ownerID: kira.id, category: "medications")
            _ = try await api.declareTresor(kira, medications)
            #expect(try await api.push(kira, [try api.envelope(kira, interventions, record: "walk", payload: "a")]).0.status == .ok)
            try await Task.sleep(for: .milliseconds(20))
            #expect(try await api.push(kira, [try api.envelope(kira, assessments, record: "scale", payload: "b")]).0.status == .ok)
            api.harness.clock.advance(by: 5_000)
            let lenaApproved = api.harness.clock.millis
            _ = try await Self.share(api, lena, doctor, "interventions")
            _ = try await Self.share(api, omar, doctor, "interventions", expiresAt: api.harness.clock.millis + 60_000)
            // A head's change time is the server's own clock when it stored it (not the movable test clock).
            try await Task.sleep(for: .milliseconds(20))
            #expect(try await api.push(kira, [try api.envelope(kira, medications, record: "pill", payload: "c")]).0.status == .ok)
            let first = try #require(try await api.repository.lastChange(ownerID: kira.id, tresorID: interventions.id))
            let newest = try #require(try await api.repository.lastChange(ownerID: kira.id, tresorID: assessments.id))
            let unshared = try #require(try await api.repository.lastChange(ownerID: kira.id, tresorID: medications.id))
            #expect(first < newest && newest < unshared)

            func list() async throws -> [String: PatientSummary] {
                let page = try api.decode(PatientList.self, try await api.send(.get, Routes.doctorPatients, token: doctor.token))
                #expect(page.done)
                #expect(Set(page.patients.map(\.patientID)).count == page.patients.count, "each patient once")
                return Dictionary(page.patients.map { ($0.username, $0) }) { a, _ in a }
            }
            var listed = try await list()
            #expect(Set(listed.keys) == ["kira", "lena", "omar"])
            #expect(listed["kira"]?.categories == ["assessments", "interventions"])
            #expect(listed["kira"]?.lastChange == newest, "the newest change of a shared category, not of the unshared one")
            #expect(listed["lena"]?.lastChange == lenaApproved, "no record yet: when the share last changed")

            // omar's share reaches its end: gone from the list.
            api.harness.clock.advance(by: 60_000)
            listed = try await list()
            #expect(Set(listed.keys) == ["kira", "lena"])
        }
    }

    /// Patient "pat" with tresors of interventions (a) and assessments (b) declared, and doctor "doc".
    static func patientWithTwoTresors(_ api: APIClient) async throws -> (TestUser, TestUser, Tresor, Tresor) {
        let patient = try await api.user("pat", role: .patient)
        let doctor = try await api.user("doc", role: .doctor)
        let a = Tresor.create(ownerID: patient.id, category: "interventions")
        let b = Tresor.create(ownerID: patient.id, category: "assessments")
        _ = try await api.declareTresor(patient, a)
        _ = try await api.declareTresor(patient, b)
        return (patient, doctor, a, b)
    }
}
