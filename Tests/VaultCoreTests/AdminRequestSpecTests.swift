import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// The signed admin request of Docs/envelope-v1.md §3.5, byte for byte as the doc prints it.
@Suite("Spec documents: the signed admin request")
struct AdminRequestSpecTests {
    @Test func theStatementAndTheDeploymentIDAreTheDocsVector() throws {
        let deployment = AdminRequestSignature.deploymentID(serverSecret: Array(0...31))
        #expect(deployment == "zmYG9NAEB3RufVCvXW0sbw")
        let statement = AdminRequestSignature.statement(
            adminKey: SigningPublicKey(uncheckedBytes: Array(0x20...0x3f)),
            deploymentID: deployment,
            method: "post",
            pathAndQuery: "/v1/admin/users/0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0/suspend",
            body: Array(#"{"reason":"left the practice"}"#.utf8),
            timestamp: 1_767_225_600_000,
            nonce: Base64URL.encode([UInt8](repeating: 0x11, count: 16))
        )
        #expect(statement.count == 234)
        let doc = try SpecVectors.doc("envelope-v1.md")
        #expect(doc.contains("### 3.5 Signed admin request") && doc.contains(deployment))
        #expect(SpecVectors.hexBlock(after: "The statement (234 bytes):", in: doc) == Hex.encode(statement))
    }

    @Test func anotherDeploymentOrAdminKeyChangesTheStatement() {
        let admin = SigningKeyPair.generate()
        func statement(_ key: SigningPublicKey, _ deployment: String) -> [UInt8] {
            AdminRequestSignature.statement(
                adminKey: key,
                deploymentID: deployment,
                method: "GET",
                pathAndQuery: "/v1/admin/pending",
                body: [],
                timestamp: 1,
                nonce: "n"
            )
        }
        let a = AdminRequestSignature.deploymentID(serverSecret: Array(repeating: 1, count: 32))
        let b = AdminRequestSignature.deploymentID(serverSecret: Array(repeating: 2, count: 32))
        #expect(a != b)
        #expect(statement(admin.publicKey, a) != statement(admin.publicKey, b))
        #expect(statement(admin.publicKey, a) != statement(SigningKeyPair.generate().publicKey, a))
    }
}
