import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultTestSupport

@testable import VaultServer

/// The compatibility policy (Docs/design.md §8): a `/v1` request from a client older than the server
/// serves, or from one that does not say its release, is told to upgrade (426 with the usual error body),
/// before any other step reads it; a release number that does not parse is a bad request.
@Suite("API: clients older than the server serves are told to upgrade")
struct APIClientVersionTests {
    @Test(arguments: Backend.allCases)
    func olderOrUnnamedClientsGet426AndCurrentOnesAreServed(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let older: [String?] = [nil, "0.9.0", "0.9.99", "0.1.0-beta"]
            for release in older {
                var headers: HTTPFields = [.authorization: "Bearer \(patient.token)"]
                headers[.careVaultClient] = release
                // A route behind a session, one open route and an admin route: the refusal comes first.
                for (method, path) in [(HTTPRequest.Method.get, Routes.me), (.post, Routes.login), (.get, Routes.adminPending)] {
                    let r = try await api.client.execute(uri: path, method: method, headers: headers, body: nil)
                    #expect(r.status == .upgradeRequired, "\(release ?? "none") \(path)")
                    #expect(api.errorCode(r) == .upgradeRequired)
                    #expect(r.headers[.upgrade] == "CareVault/\(CareVaultVersion.minimumClient)")
                    let message = try api.decode(APIErrorBody.self, r).error.message
                    #expect(message.contains("upgrade the CareVault tools") && message.contains("from 0.10.0 on"), "\(message)")
                }
            }
            for garbage in ["latest", "0.10", "10", "0.10.0.0", "v0.10.0"] {
                let headers: HTTPFields = [.authorization: "Bearer \(patient.token)", .careVaultClient: garbage]
                let r = try await api.client.execute(uri: Routes.me, method: .get, headers: headers, body: nil)
                #expect(r.status == .badRequest && api.errorCode(r) == .badRequest, "\(garbage)")
            }
            for current in [CareVaultVersion.release, "0.10.1", "1.0.0", "0.10.0-rc.1"] {
                let headers: HTTPFields = [.authorization: "Bearer \(patient.token)", .careVaultClient: current]
                #expect(try await api.client.execute(uri: Routes.me, method: .get, headers: headers, body: nil).status == .ok, "\(current)")
            }
            // Health checks and monitors need no header.
            #expect(try await api.client.execute(uri: Routes.health, method: .get, headers: [:], body: nil).status == .ok)
        }
    }
}
