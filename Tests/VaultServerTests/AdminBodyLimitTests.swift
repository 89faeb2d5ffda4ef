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

/// Admin bodies are small (an approval is about 1 KiB): nothing larger than `APILimits.maxAdminBodyBytes`
/// is held, signed or not, and an unsigned request is refused before its body is read.
@Suite struct AdminBodyLimitTests {
    /// Headers signing `body` for POST `path` with `key`.
    func headers(_ api: APIClient, _ path: String, _ body: [UInt8], key: SigningKeyPair) async throws -> HTTPFields {
        let signed = AdminRequestSignature.sign(
            method: "POST",
            pathAndQuery: path,
            body: body,
            timestamp: api.harness.clock.millis,
            deploymentID: try await api.deploymentID(),
            adminKey: key
        )
        var headers: HTTPFields = [.contentType: "application/json", .careVaultClient: CareVaultVersion.release]
        headers[HTTPField.Name(AdminRequestSignature.timestampHeader)!] = signed.timestamp
        headers[HTTPField.Name(AdminRequestSignature.nonceHeader)!] = signed.nonce
        headers[HTTPField.Name(AdminRequestSignature.signatureHeader)!] = signed.signature
        return headers
    }

    @Test(arguments: Backend.allCases)
    func adminBodiesOverSixtyFourKiBAreRefusedSignedOrNot(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            #expect(APILimits.maxAdminBodyBytes == 64 * 1024)
            let path = Routes.adminRejectRegistration(UUID().uuidString)
            // A reason padded past the cap: valid JSON, genuinely signed by the admin.
            let padded = Array(#"{"reason":"\#(String(repeating: "x", count: 70 * 1024))"}"#.utf8)
            for key in [api.admin, SigningKeyPair.generate()] {
                let r = try await api.client.execute(
                    uri: path,
                    method: .post,
                    headers: try await headers(api, path, padded, key: key),
                    body: ByteBuffer(bytes: padded)
                )
                #expect(r.status == .contentTooLarge && api.errorCode(r) == .payloadTooLarge)
            }
            // Just under the cap it is read and signed as before (a reason that long is then refused in words).
            let fits = Array(#"{"reason":"\#(String(repeating: "x", count: 60 * 1024))"}"#.utf8)
            let r = try await api.client.execute(
                uri: path,
                method: .post,
                headers: try await headers(api, path, fits, key: api.admin),
                body: ByteBuffer(bytes: fits)
            )
            #expect(r.status != .contentTooLarge && r.status != .unauthorized, "\(r.status)")
            // A declared length over the cap is refused from the headers alone.
            var declared = try await headers(api, path, [], key: api.admin)
            declared[.contentLength] = String(1024 * 1024)
            let early = try await api.client.execute(uri: path, method: .post, headers: declared, body: ByteBuffer(bytes: padded))
            #expect(early.status == .contentTooLarge)
        }
    }

    @Test(arguments: Backend.allCases)
    func anUnsignedAdminRequestIsRefusedBeforeItsBodyIsRead(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let big = [UInt8](repeating: 0x20, count: 8 * 1024 * 1024)
            let r = try await api.send(.post, Routes.adminRejectRegistration(UUID().uuidString), rawBody: big)
            #expect(r.status == .unauthorized && api.errorCode(r) == .unauthorized)
        }
    }
}
