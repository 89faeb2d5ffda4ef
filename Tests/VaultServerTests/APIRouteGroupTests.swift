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

/// The route groups carry the access rules (Docs/design.md §6): these tests walk every route, so one
/// registered in the wrong group, or answering differently from the others, is caught.
@Suite("API: route groups and the bytes they answer with")
struct RouteGroupAPITests {
    static let someID = UUID().uuidString

    /// Every route behind a session.
    static let sessionRoutes: [(HTTPRequest.Method, String)] = [
        (.post, Routes.logout), (.get, Routes.me), (.get, Routes.userByName("doc")), (.get, Routes.userByID(someID)),
        (.put, Routes.tresors), (.get, Routes.tresors), (.post, Routes.shares), (.get, Routes.shares),
        (.post, Routes.shareRevoke(someID)), (.put, Routes.shareGrant(someID)), (.get, Routes.doctorPatients),
        (.post, Routes.records), (.get, Routes.records), (.get, Routes.accessLog),
    ]

    /// Every route behind the admin's signature.
    static let adminRoutes: [(HTTPRequest.Method, String)] = [
        (.get, Routes.adminPending), (.post, Routes.adminApproveRegistration(someID)), (.post, Routes.adminRejectRegistration(someID)),
        (.post, Routes.adminApproveShare(someID)), (.post, Routes.adminRejectShare(someID)), (.get, Routes.adminUsers),
        (.get, Routes.adminAudit), (.get, Routes.adminAuditVerify),
    ]

    static let missingToken = APIErrorBody(code: .unauthorized, message: "a valid session token is required (Authorization: Bearer …)")
    static let deadSession = APIErrorBody(code: .unauthorized, message: "session expired or logged out; log in again")

    func text(_ r: TestResponse) -> String { String(decoding: r.body.readableBytesView, as: UTF8.self) }

    /// The error body, decoded (its exact bytes are checked in SpecConformanceAPITests).
    func error(_ r: TestResponse) -> APIErrorBody? { try? JSONDecoder().decode(APIErrorBody.self, from: Data(r.body.readableBytesView)) }

    @Test func sessionRoutesRefuseMissingUnknownAndExpiredSessions() async throws {
        try await APIHarness.run(.sqlite) { api in
            let patient = try await api.user("pat", role: .patient)
            for (method, path) in Self.sessionRoutes {
                let missing = try await api.send(method, path)
                #expect(missing.status == .unauthorized && error(missing) == Self.missingToken, "\(method) \(path) without a token")
                #expect(missing.headers[.contentType] == "application/json")
                let garbled = try await api.send(method, path, token: String(repeating: "x", count: 129))
                #expect(garbled.status == .unauthorized && error(garbled) == Self.missingToken, "\(method) \(path) with a garbled token")
                let unknown = try await api.send(method, path, token: "bogus")
                #expect(unknown.status == .unauthorized && error(unknown) == Self.deadSession, "\(method) \(path) with an unknown token")
            }
            #expect(try await api.send(.get, Routes.me, token: patient.token).status == .ok)
            api.harness.clock.advance(by: APILimits.sessionLifetimeMs + 1)
            for (method, path) in Self.sessionRoutes {
                let expired = try await api.send(method, path, token: patient.token)
                #expect(expired.status == .unauthorized && error(expired) == Self.deadSession, "\(method) \(path) after the session expired")
            }
        }
    }

    @Test func adminRoutesRefuseUnsignedAndForeignRequests() async throws {
        try await APIHarness.run(.sqlite) { api in
            let patient = try await api.user("pat", role: .patient)
            for (method, path) in Self.adminRoutes {
                let unsigned = try await api.send(method, path, token: patient.token)
                #expect(unsigned.status == .unauthorized, "\(method) \(path): a session is not an admin signature")
                #expect(
                    try api.decode(APIErrorBody.self, unsigned)
                        == APIErrorBody(
                            code: .unauthorized,
                            message: "admin requests must be signed with the admin key"
                        )
                )
                let (foreign, _) = try await api.adminSend(method, path, key: .generate())
                #expect(foreign.status == .unauthorized && api.errorCode(foreign) == .invalidSignature, "\(method) \(path) signed by another key")
            }
        }
    }

    @Test func openRoutesNeedNoCredentials() async throws {
        try await APIHarness.run(.sqlite) { api in
            #expect(try await api.send(.get, Routes.health).status == .ok)
            let params = try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: "nobody"))
            #expect(params.status == .ok)
            let login = try await api.wrongLogin("nobody")
            #expect(login.status == .unauthorized && api.errorCode(login) == .invalidCredentials)
            let (_, _, registered) = try await api.register("newcomer", role: .patient)
            #expect(registered.status == .accepted)
        }
    }

    @Test func answersUseTheAPIEncodingAndStatus() async throws {
        try await APIHarness.run(.sqlite) { api in
            let patient = try await api.user("pat", role: .patient)
            let doctor = try await api.user("doc", role: .doctor)
            let wire = JSONEncoder()
            wire.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]

            let me = try await api.send(.get, Routes.me, token: doctor.token)
            #expect(me.status == .ok && me.headers[.contentType] == "application/json")
            #expect(Array(me.body.readableBytesView) == Array(try wire.encode(DirectoryEntry(certificate: doctor.certificate))))

            let tresor = Tresor.create(ownerID: patient.id, category: "interventions")
            let declared = try await api.declareTresor(patient, tresor)
            let info = try api.decode(TresorInfo.self, declared)
            #expect(Array(declared.body.readableBytesView) == Array(try wire.encode(info)))

            let grant = try Grant.request(
                patient: patient.identity,
                member: doctor.certificate,
                adminKey: api.admin.publicKey,
                ownerID: patient.id,
                category: tresor.category,
                tresorVersion: 1,
                createdAt: api.harness.clock.millis,
                expiresAt: nil
            )
            let created = try await api.send(.post, Routes.shares, json: CreateShareRequest(grant: grant), token: patient.token)
            #expect(created.status == .created && created.headers[.contentType] == "application/json")
            #expect(Array(created.body.readableBytesView) == Array(try wire.encode(try api.decode(ShareInfo.self, created))))

            // The one answer that is not JSON: an empty binary page (Docs/envelope-v1.md §7.3).
            let page = try await api.pull(patient.token)
            #expect(page.headers[.contentType] == RecordMediaType.page)
            #expect(
                Array(page.body.readableBytesView) == PullPageFrame.head(count: 0) + PullPageFrame.tail(done: true, nextCursor: 0, commitments: [])
            )

            let out = try await api.send(.post, Routes.logout, token: doctor.token)
            #expect(out.status == .noContent && out.body.readableBytes == 0 && out.headers[.contentType] == nil)
        }
    }
}
