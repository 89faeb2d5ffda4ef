import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

/// The live event stream (Docs/events.md) on both backends: who hears what, resuming, the end of a
/// stream whose session ends, heartbeats and caps.
@Suite("Live events")
struct EventsTests {
    @Test(arguments: Backend.allCases)
    func eachPartyHearsItsOwnAndADoctorWithoutAShareHearsNothing(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let (patient, doctor, tresor) = try await w.sharedPair("pat", "doc")
            let stranger = try await w.api.user("eve", role: .doctor)
            let other = try await w.api.user("other", role: .patient)
            let streams = [try await w.open(patient), try await w.open(doctor), try await w.open(stranger), try await w.open(other)]
            for s in streams { try await s.wait("ready") { !$0.named("ready").isEmpty } }

            let sequence = try await w.push(patient, tresor, "walk")
            for s in streams[0...1] { try await s.wait("the change") { !$0.named("change").isEmpty } }
            #expect(streams[0].named("change").map(\.change) == [ChangeEventData(owner: patient.id, sequence: sequence)])
            // The doctor is told that something it holds changed, never the patient's overall change counter.
            #expect(streams[1].named("change").map(\.change) == [ChangeEventData(owner: patient.id, sequence: 0)])
            #expect(!streams[1].raw.contains("\"sequence\":\(sequence)"), "\(streams[1].raw)")

            // A share request of another tresor to the stranger: the patient hears of it; the stranger does not
            // (a request the admin has not approved is the patient's business alone), nor does anyone else.
            let other2 = Tresor.create(ownerID: patient.id, category: "assessments")
            #expect(try await w.api.declareTresor(patient, other2).status == .ok)
            let request = try await w.api.requestShare(patient, stranger, other2)
            try await streams[0].wait("the share request") { !$0.named("share").isEmpty }
            #expect(streams[0].named("share").map(\.share?.share) == [request.shareID])
            // The patient withdraws it before any decision: the patient hears that too, the stranger nothing.
            let withdrawal = ShareRevocation.make(shareID: request.shareID, request: request.grant, patient: patient.identity, revokedAt: 1)
            let withdrawn = try await w.api.send(
                .post,
                Routes.shareRevoke(request.shareID.uuidString),
                json: RevokeShareRequest(revocation: withdrawal),
                token: patient.token
            )
            #expect(withdrawn.status == .ok)
            try await streams[0].wait("the withdrawal") { $0.named("share").count == 2 }
            // A share not active reads nothing, so a push to that tresor still wakes only the patient.
            try await w.push(patient, other2, "assessment")
            try await streams[0].wait("the second change") { $0.named("change").count == 2 }
            try await Task.sleep(for: .milliseconds(300))
            #expect(streams[1].named("change").count == 1, "the doctor of another tresor hears nothing of this one")
            #expect(streams[2].named("change").isEmpty, "a doctor without an active share hears nothing")
            #expect(streams[2].named("share").isEmpty, "a doctor hears nothing of a request not approved: \(streams[2].raw)")
            #expect(streams[3].events.map(\.name) == ["ready"], "another patient hears nothing: \(streams[3].raw)")
            #expect(!streams[2].raw.contains(patient.id.uuidString) && !streams[3].raw.contains(patient.id.uuidString))
            for s in streams { await s.close() }
            #expect(w.hub.openStreams == 0)
        }
    }

    @Test(arguments: Backend.allCases)
    func approvalAndKeysReachBothPartiesAndThenTheDoctorHearsChanges(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let patient = try await w.api.user("pat", role: .patient)
            let doctor = try await w.api.user("doc", role: .doctor)
            let tresor = Tresor.create(ownerID: patient.id, category: "interventions")
            #expect(try await w.api.declareTresor(patient, tresor).status == .ok)
            let (p, d) = (try await w.open(patient), try await w.open(doctor))
            let share = try await w.api.requestShare(patient, doctor, tresor)
            #expect(try await w.api.approveShare(share).status == .ok)
            #expect(try await w.api.deliverKeys(patient, doctor, share, tresor).status == .ok)
            try await p.wait("three share events") { $0.named("share").count == 3 }
            #expect(p.named("share").compactMap(\.share?.state) == ["pending", "active", "active"])
            // Named once approved, never while pending.
            #expect(p.named("share").map(\.share?.patient) == [nil, patient.id, patient.id])
            // The doctor hears of the share from its approval on: never of the request while pending.
            try await d.wait("two share events") { $0.named("share").count == 2 }
            #expect(d.named("share").compactMap(\.share?.state) == ["active", "active"])
            #expect(d.named("share").map(\.share?.patient) == [patient.id, patient.id])
            let sequence = try await w.push(patient, tresor, "walk")
            try await d.wait("the change") { !$0.named("change").isEmpty }
            #expect(d.named("change").first?.change == ChangeEventData(owner: patient.id, sequence: 0))
            #expect(sequence > 0)
            await p.close()
            await d.close()
        }
    }

    @Test(arguments: Backend.allCases)
    func resumingWithLastEventIDMissesNothingOrIsToldToResync(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let patient = try await w.api.user("pat", role: .patient)
            let tresor = Tresor.create(ownerID: patient.id, category: "interventions")
            #expect(try await w.api.declareTresor(patient, tresor).status == .ok)
            let first = try await w.open(patient)
            try await first.wait("ready") { !$0.named("ready").isEmpty }
            let lastID = try #require(first.named("ready").first?.id)
            await first.close()

            let s1 = try await w.push(patient, tresor, "a")
            let s2 = try await w.push(patient, tresor, "b")
            let resumed = try await w.open(patient, lastEventID: lastID)
            try await resumed.wait("ready") { !$0.named("ready").isEmpty }
            #expect(resumed.events.map(\.name) == ["change", "change", "ready"])
            #expect(resumed.named("change").compactMap(\.change?.sequence) == [s1, s2])
            #expect(resumed.named("ready").first?.id == resumed.named("change").last?.id)
            await resumed.close()

            // An id of another instance, of this one but never issued, or malformed: a resync, then ready.
            for bad in ["0123456789abcdef-1", "\(w.hub.instance)-999999", "garbage", "\(w.hub.instance)-x"] {
                let s = try await w.open(patient, lastEventID: bad)
                try await s.wait("ready") { !$0.named("ready").isEmpty }
                #expect(s.events.map(\.name) == ["resync", "ready"], "\(bad)")
                #expect(s.named("resync").first?.reason == "unknown-id")
                await s.close()
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func anIDOlderThanTheResumeBufferIsToldToResync(_ backend: Backend) async throws {
        var limits = EventHub.Limits()
        limits.resumeBuffer = 2
        try await EventsWorld.run(backend, limits: limits) { w in
            let patient = try await w.api.user("pat", role: .patient)
            let tresor = Tresor.create(ownerID: patient.id, category: "interventions")
            #expect(try await w.api.declareTresor(patient, tresor).status == .ok)
            let first = try await w.open(patient)
            try await first.wait("ready") { !$0.named("ready").isEmpty }
            let lastID = try #require(first.named("ready").first?.id)
            await first.close()
            for r in ["a", "b", "c"] { try await w.push(patient, tresor, r) }
            let s = try await w.open(patient, lastEventID: lastID)
            try await s.wait("ready") { !$0.named("ready").isEmpty }
            #expect(s.events.map(\.name) == ["resync", "ready"])
            #expect(s.named("resync").first?.reason == "too-old")
            await s.close()
        }
    }

    @Test(arguments: Backend.allCases)
    func aRevokedLoggedOutOrSuspendedSessionEndsItsStream(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let patient = try await w.api.user("pat", role: .patient)
            let second = try w.api.decode(LoginResponse.self, try await w.api.login("pat", password: patient.password)).token
            let other = TestUser(identity: patient.identity, certificate: patient.certificate, token: second, password: patient.password)
            let (kept, revoked) = (try await w.open(patient), try await w.open(other))
            #expect(try await w.api.send(.post, Routes.sessionsRevokeOthers, token: patient.token).status == .ok)
            try await revoked.wait("the end") { $0.hasEnded }
            #expect(revoked.events.last?.name == "account")
            #expect(revoked.events.last?.reason == "session-ended")
            #expect(revoked.events.last?.id == nil)
            try await Task.sleep(for: .milliseconds(200))
            #expect(!kept.hasEnded, "the session that revoked the others keeps its stream")

            let (r, _) = try await w.api.adminSend(.post, Routes.adminSuspend(patient.id.uuidString), json: SuspendRequest(reason: "test"))
            #expect(r.status == .ok)
            try await kept.wait("the end") { $0.hasEnded }
            #expect(kept.events.last?.reason == "suspended")
            #expect(w.hub.openStreams == 0)
        }
    }

    @Test(arguments: Backend.allCases)
    func heartbeatsComeAndCheckTheSessionEvenWithoutANotification(_ backend: Backend) async throws {
        var limits = EventHub.Limits()
        limits.heartbeat = .seconds(1)
        try await EventsWorld.run(backend, limits: limits) { w in
            let patient = try await w.api.user("pat", role: .patient)
            let s = try await w.open(patient)
            try await s.wait("a heartbeat") { $0.raw.contains(": hb\n\n") }
            // The session ends behind the hub's back (as through an instance that could not announce it).
            try await w.api.repository.deleteSession(tokenHash: VaultService.tokenHash(patient.token))
            try await s.wait("the end", seconds: 15) { $0.hasEnded }
            #expect(s.events.last?.reason == "session-ended")
        }
    }

    @Test(arguments: Backend.allCases)
    func capsAnswer429PerAccountAnd503PerInstanceAndBadRequestsAreRefused(_ backend: Backend) async throws {
        var limits = EventHub.Limits(perAccount: 2, perInstance: 3)
        limits.evictableAfter = .zero
        try await EventsWorld.run(backend, limits: limits) { w in
            let (a, b, c) = (
                try await w.api.user("pat", role: .patient), try await w.api.user("doc", role: .doctor), try await w.api.user("eve", role: .doctor)
            )
            let streams = [try await w.open(a), try await w.open(a)]
            let perAccount = try await w.api.send(.get, Routes.events, token: a.token, contentType: nil)
            #expect(perAccount.status == .tooManyRequests)
            #expect(perAccount.headers[.retryAfter] == "5")
            #expect(w.api.errorCode(perAccount) == .rateLimited)
            let third = try await w.open(b)
            // The instance is full: an account with none gets one, and the heaviest account (2) gives up its oldest,
            // which ends without an account event (its client reconnects as after any end).
            #expect(!streams[0].hasEnded)
            let fairShare = try await w.open(c)
            try await fairShare.wait("ready") { !$0.named("ready").isEmpty }
            try await streams[0].wait("the oldest stream of the heaviest account ended") { $0.hasEnded }
            #expect(streams[0].named("account").isEmpty)
            #expect(w.hub.openStreams == 3)
            // Now every account holds one: a second one is refused, and nobody is ended for it.
            let perInstance = try await w.api.send(.get, Routes.events, token: b.token, contentType: nil)
            #expect(perInstance.status == .serviceUnavailable)
            #expect(perInstance.headers[.retryAfter] == "5")
            #expect(w.hub.openStreams == 3)

            let unauthenticated = try await w.api.send(.get, Routes.events, contentType: nil)
            #expect(unauthenticated.status == .unauthorized)
            let longID: HTTPFields = [
                .authorization: "Bearer \(c.token)", .careVaultClient: CareVaultVersion.release,
                EventsController.lastEventID: String(repeating: "a", count: 65),
            ]
            #expect(try await w.api.client.execute(uri: Routes.events, method: .get, headers: longID, body: nil).status == .badRequest)

            // A stream that ends frees its place.
            await streams[1].close()
            let fourth = try await w.open(c)
            try await fourth.wait("ready") { !$0.named("ready").isEmpty }
            for s in [streams[0], third, fairShare, fourth] { await s.close() }
            #expect(w.hub.openStreams == 0)
        }
    }

    @Test(arguments: Backend.allCases)
    func aShareThatReachesItsEndDateWhileTheStreamIsOpenStopsItsChanges(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let (patient, doctor, tresor) = try await w.sharedPair("pat", "doc", expiresAt: w.clock.millis + 60_000)
            let (p, d) = (try await w.open(patient), try await w.open(doctor))
            for s in [p, d] { try await s.wait("ready") { !$0.named("ready").isEmpty } }
            let first = try await w.push(patient, tresor, "walk")
            try await d.wait("the change") { !$0.named("change").isEmpty }
            // The end date passes: both parties hear `share` `expired` once, at the hub's next second (the wait
            // is longer than that, for a machine busy with the rest of the suite); the doctor no longer hears of
            // this patient.
            w.clock.advance(by: 60_000)
            for s in [p, d] { try await s.wait("the expiry", seconds: 30) { $0.named("share").contains { $0.share?.state == "expired" } } }
            try await w.push(patient, tresor, "run")
            try await p.wait("the second change") { $0.named("change").count == 2 }
            try await Task.sleep(for: .milliseconds(1_500))
            #expect(d.named("change").map(\.change) == [ChangeEventData(owner: patient.id, sequence: 0)], "\(d.raw)")
            #expect(p.named("change").first?.change == ChangeEventData(owner: patient.id, sequence: first))
            for s in [p, d] { #expect(s.named("share").map { $0.share?.state } == ["expired"], "announced once: \(s.raw)") }
            for s in [p, d] { #expect(s.named("share").map { $0.share?.patient } == [patient.id]) }
            for s in [p, d] { await s.close() }
        }
        // A share that ended otherwise just before its end date (here underneath, with no event yet) did not
        // expire: the end date passes and nothing says `expired`.
        try await EventsWorld.run(backend) { w in
            let (patient, doctor, _, share) = try await w.sharedPairWithShare("pat", "doc", expiresAt: w.clock.millis + 60_000)
            let (p, d) = (try await w.open(patient), try await w.open(doctor))
            for s in [p, d] { try await s.wait("ready") { !$0.named("ready").isEmpty } }
            try await ServerOperator(w.api.repository).editShares(.id(share.shareID), state: .revoked)
            w.clock.advance(by: 60_000)
            try await Task.sleep(for: .milliseconds(2_500))
            for s in [p, d] { #expect(s.named("share").isEmpty, "a revoked share is not announced as expired: \(s.raw)") }
            for s in [p, d] { await s.close() }
        }
    }

    @Test(arguments: Backend.allCases)
    func aChangeQueuedBeforeTheEndDateOrARevocationIsNotWrittenAfterIt(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let (patient, doctor, tresor) = try await w.sharedPair("pat", "doc", expiresAt: w.clock.millis + 60_000)
            let p = try await w.open(patient)
            try await p.wait("ready") { !$0.named("ready").isEmpty }
            // The doctor's writer has not taken its step yet when the change is queued, nor when the end
            // date passes.
            let expiring = try await w.writer(doctor)
            try await w.push(patient, tresor, "walk")
            try await p.wait("the change") { $0.named("change").count == 1 }
            w.clock.advance(by: 60_000)
            let d = StreamTap(expiring)
            try await d.wait("ready") { !$0.named("ready").isEmpty }
            #expect(d.named("change").isEmpty, "\(d.raw)")
            await d.close()
        }
        try await EventsWorld.run(backend) { w in
            let (patient, doctor, tresor, share) = try await w.sharedPairWithShare("pat", "doc")
            let p = try await w.open(patient)
            try await p.wait("ready") { !$0.named("ready").isEmpty }
            let revoked = try await w.writer(doctor)
            try await w.push(patient, tresor, "walk")
            let revocation = ShareRevocation.make(shareID: share.shareID, request: share.grant, patient: patient.identity, revokedAt: w.clock.millis)
            let path = Routes.shareRevoke(share.shareID.uuidString)
            #expect(try await w.api.send(.post, path, json: RevokeShareRequest(revocation: revocation), token: patient.token).status == .ok)
            try await p.wait("the revocation") { $0.named("share").contains { $0.share?.state == "revoked" } }
            let d = StreamTap(revoked)
            try await d.wait("the revocation") { !$0.named("share").isEmpty }
            #expect(d.events.map(\.name) == ["ready", "share"], "\(d.raw)")
            await d.close()
        }
    }

    @Test(arguments: Backend.allCases)
    func anExpiredSessionGetsNoEventEvenWhenTheDatabaseDoesNotAnswerItsCheck(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let patient = try await w.api.user("pat", role: .patient)
            let (expired, unchecked) = (try await w.writer(patient), try await w.writer(patient))
            w.clock.advance(by: APILimits.sessionLifetimeMs + 1)
            try await w.api.repository.attackerExecutes("ALTER TABLE sessions RENAME TO sessions_away")
            // A change and a session check wait in the same step.
            w.hub.deliver(.change(owner: patient.id, sequence: 1, tresors: []))
            w.hub.deliver(.account(patient.id))
            let s = StreamTap(expired)
            try await s.wait("the end") { $0.hasEnded }
            #expect(s.events.map(\.name) == ["account"], "\(s.raw)")
            #expect(s.events.last?.reason == "session-ended")

            // A session check the database does not answer ends the stream, without `account`: the client
            // reconnects, and the authenticator decides.
            w.clock.advance(by: -(APILimits.sessionLifetimeMs + 1))
            let u = StreamTap(unchecked)
            try await u.wait("the end") { $0.hasEnded }
            #expect(!u.raw.contains("event: account"), "\(u.raw)")
            try await w.api.repository.attackerExecutes("ALTER TABLE sessions_away RENAME TO sessions")
        }
    }

    @Test(arguments: Backend.allCases)
    func aPatientWhoDeletesTheAccountEndsTheSharesForTheDoctor(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let (patient, doctor, _, share) = try await w.sharedPairWithShare("pat", "doc")
            let stranger = try await w.api.user("eve", role: .doctor)
            let (d, e) = (try await w.open(doctor), try await w.open(stranger))
            for s in [d, e] { try await s.wait("ready") { !$0.named("ready").isEmpty } }
            let params = try await w.api.loginParameters("pat")
            let key = try await PasswordKeys.derive(password: patient.password, salt: params.salt, parameters: params.kdf).loginKey.copyBytes()
            let body = DeleteAccountRequest(confirmUsername: "pat", currentLoginKey: Base64URL.encode(key))
            #expect(try await w.api.send(.post, Routes.deleteAccount, json: body, token: patient.token).status == .ok)
            try await d.wait("the end of the share") { !$0.named("share").isEmpty }
            #expect(d.named("share").map(\.share) == [ShareEventData(share: share.shareID, state: "revoked")], "\(d.raw)")
            try await Task.sleep(for: .milliseconds(300))
            #expect(e.events.map(\.name) == ["ready"], "a doctor who was not party hears nothing: \(e.raw)")
            for s in [d, e] { await s.close() }
        }
    }

    @Test(arguments: Backend.allCases)
    func aSessionThatStopsPassingBeforeTheStreamOpensIsRefused(_ backend: Backend) async throws {
        try await EventsWorld.run(backend) { w in
            let (patient, other) = (try await w.api.user("pat", role: .patient), try await w.api.user("eve", role: .patient))
            // Both passed the authenticator; then one session ends and the other account is suspended.
            let (ended, suspended) = (try await w.caller(patient), try await w.caller(other))
            try await w.api.repository.deleteSession(tokenHash: ended.tokenHash)
            let (r, _) = try await w.api.adminSend(.post, Routes.adminSuspend(other.id.uuidString), json: SuspendRequest(reason: "test"))
            #expect(r.status == .ok)
            for (caller, status) in [(ended, HTTPResponse.Status.unauthorized), (suspended, .forbidden)] {
                let error = await #expect(throws: APIError.self) { try await w.service.openEventStream(caller, lastEventID: nil) }
                #expect(error?.status == status)
            }
            #expect(w.hub.openStreams == 0)
        }
    }

    /// A full instance never ends a stream younger than `evictableAfter` for a newcomer (Docs/events.md §6).
    @Test func aYoungStreamIsNotEndedForANewcomer() throws {
        var limits = EventHub.Limits(perAccount: 4, perInstance: 2)
        limits.evictableAfter = .seconds(3_600)
        let hub = EventHub(limits: limits)
        let (heavy, newcomer) = (UUID(), UUID())
        let held = try (0..<2).map { _ in try hub.subscribe(account: heavy, tokenHash: "h", watch: [:], now: { 0 }, lastEventID: nil) }
        #expect(throws: APIError.self) { _ = try hub.subscribe(account: newcomer, tokenHash: "n", watch: [:], now: { 0 }, lastEventID: nil) }
        #expect(hub.openStreams == 2)
        for sub in held { hub.unsubscribe(sub) }
        #expect(hub.openStreams == 0)
    }
}
