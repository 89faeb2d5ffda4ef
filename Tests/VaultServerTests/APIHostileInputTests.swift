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
            #expect(try await api.send(.get, Routes.records + "?since=-1", token: user.token, accept: RecordMediaType.page).status == .badRequest)
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
    /// PostgreSQL refuses NUL in text: a name carrying one must not reach the database (it was a 500 there).
    @Test(arguments: Backend.allCases)
    func usernamesWithNulOrControlCharactersNeverReachTheDatabase(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            for name in ["ab\u{0}c", "\u{1B}[2Jbob", "dr\u{0}bob"] {
                let params = try await api.send(.post, Routes.loginParameters, json: ["username": name])
                #expect(params.status == .ok, "\(name.debugDescription)")
                let key = Base64URL.encode([UInt8](repeating: 7, count: 32))
                let login = try await api.send(.post, Routes.login, json: ["username": name, "loginKey": key])
                #expect(login.status == .unauthorized, "\(name.debugDescription)")
            }
        }
    }

    @Test func adminTimestampAtTheEdgesOfInt64DoesNotCrash() async throws {
        try await APIHarness.run(.sqlite) { api in
            for ts in [Int64.min + 1, Int64.min, Int64.max, -9_223_372_036_854_775_000] {
                var headers: HTTPFields = [.contentType: "application/json", .careVaultClient: CareVaultVersion.release]
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
            var grant = try Grant.make(
                patient: patient.identity,
                member: patient.certificate,
                adminKey: api.admin.publicKey,
                tresor: Tresor.create(ownerID: patient.id, category: "interventions"),
                createdAt: 1
            )
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
            for path in [
                Routes.accessLog + "?after=18446744073709551615", Routes.records + "?since=18446744073709551615",
                Routes.accessLog + "?after=9223372036854775808",
            ] {
                #expect(try await api.send(.get, path, token: patient.token, accept: RecordMediaType.page).status == .badRequest, "\(path)")
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
            // Versions count from 1: a first self-grant at 0 would leave the category stuck for every reader.
            #expect(try await api.declareTresor(patient, tresor, version: 0).status == .badRequest)
            _ = try await api.declareTresor(patient, tresor)
            let share = try await api.requestShare(patient, doctor, tresor, expiresAt: api.harness.clock.millis + 3_600_000)
            // Before approval the doctor is not shown the request.
            #expect(try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: doctor.token)).shares.isEmpty)
            _ = try await api.approveShare(share)

            tresor.rotate()
            #expect(try await api.declareTresor(patient, tresor).status == .conflict, "a self-grant extends the stored version by one")
            #expect(try await api.declareTresor(patient, tresor, version: 2).status == .ok)
            let longer = try Grant.make(
                patient: patient.identity,
                member: doctor.certificate,
                adminKey: api.admin.publicKey,
                tresor: tresor,
                createdAt: api.harness.clock.millis,
                expiresAt: api.harness.clock.millis + 99_000_000
            )
            let path = Routes.shareGrant(share.shareID.uuidString)
            let refused = try await api.send(.put, path, json: UpdateShareGrantRequest(grant: longer), token: patient.token)
            #expect(refused.status == .badRequest, "the expiry cannot be extended without the admin")
            let rotated = try Grant.make(
                patient: patient.identity,
                member: doctor.certificate,
                adminKey: api.admin.publicKey,
                tresor: tresor,
                createdAt: api.harness.clock.millis,
                expiresAt: share.grant.expiresAt
            )
            let ok = try await api.send(.put, path, json: UpdateShareGrantRequest(grant: rotated), token: patient.token)
            #expect(ok.status == .ok)
            let seen = try #require(try api.decode(ShareList.self, try await api.send(.get, Routes.shares, token: doctor.token)).shares.first)
            #expect(seen.grant == share.grant, "the approved grant is kept")
            #expect(seen.latestGrant?.epochs == [1, 2])
            try seen.approval!.verifyShare(adminKey: api.admin.publicKey, shareID: seen.shareID, grant: seen.grant)
        }
    }
}
