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

/// A signed admin request names its deployment (Docs/envelope-v1.md §3.5): one captured at one deployment
/// is refused by another, even one that pins the same admin key.
@Suite struct AdminAudienceTests {
    static func deploymentID(_ client: any TestClientProtocol) async throws -> String {
        let r = try await client.execute(uri: Routes.deployment, method: .get, headers: [.careVaultClient: CareVaultVersion.release], body: nil)
        #expect(r.status == .ok)
        return try JSONDecoder().decode(DeploymentResponse.self, from: Data(r.body.readableBytesView)).deploymentID
    }

    static func send(_ client: any TestClientProtocol, _ signed: AdminRequestSignature.Headers) async throws -> TestResponse {
        let headers: HTTPFields = [
            .careVaultClient: CareVaultVersion.release,
            HTTPField.Name(AdminRequestSignature.timestampHeader)!: signed.timestamp,
            HTTPField.Name(AdminRequestSignature.nonceHeader)!: signed.nonce,
            HTTPField.Name(AdminRequestSignature.signatureHeader)!: signed.signature,
        ]
        return try await client.execute(uri: Routes.adminUsers, method: .get, headers: headers, body: nil)
    }

    @Test(arguments: Backend.allCases)
    func aRequestSignedForOneDeploymentIsRefusedByAnotherWithTheSameAdminKey(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repoA in
            try await TestDatabase.with(backend) { repoB in
                let admin = SigningKeyPair.generate()
                let clock = TestClock()
                let appA = Application(router: buildRouter(repository: repoA, adminKey: admin.publicKey, clock: clock.function))
                let appB = Application(router: buildRouter(repository: repoB, adminKey: admin.publicKey, clock: clock.function))
                try await appA.test(.router) { a in
                    try await appB.test(.router) { b in
                        let idA = try await Self.deploymentID(a)
                        let idB = try await Self.deploymentID(b)
                        #expect(idA != idB && idA.count == 22)
                        #expect(try await Self.deploymentID(a) == idA, "stable for one deployment")
                        func sign(for deployment: String) -> AdminRequestSignature.Headers {
                            AdminRequestSignature.sign(
                                method: "GET",
                                pathAndQuery: Routes.adminUsers,
                                body: [],
                                timestamp: clock.millis,
                                deploymentID: deployment,
                                adminKey: admin
                            )
                        }
                        // Captured at A (never used there), replayed at B: refused.
                        let forA = sign(for: idA)
                        let replayed = try await Self.send(b, forA)
                        #expect(replayed.status == .unauthorized)
                        #expect(String(decoding: replayed.body.readableBytesView, as: UTF8.self).contains("invalid_signature"))
                        #expect(try await Self.send(a, forA).status == .ok, "at its own deployment it is served")
                        #expect(try await Self.send(b, sign(for: idB)).status == .ok)
                    }
                }
            }
        }
    }
}
