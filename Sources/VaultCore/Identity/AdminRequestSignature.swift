import Foundation
import VaultCrypto

/// How the admin authenticates requests to the server (no password exists for the admin): an Ed25519
/// signature by the admin key over its audience (the admin's public key and the deployment id the
/// server publishes), the method, the path with its query, the hash of the body, a timestamp and a random
/// nonce (Ed25519 is deterministic: without the nonce two identical requests in one millisecond would
/// carry one signature). The server accepts a signature once, inside a short window, and only when it
/// names its own deployment, so a request signed for one deployment is refused by every other
/// (Docs/envelope-v1.md §3.5).
public enum AdminRequestSignature {
    /// Header carrying the timestamp (Unix milliseconds).
    public static let timestampHeader = "X-CareVault-Admin-Timestamp"
    /// Header carrying the random nonce (base64url of 16 bytes).
    public static let nonceHeader = "X-CareVault-Admin-Nonce"
    /// Header carrying the base64url signature.
    public static let signatureHeader = "X-CareVault-Admin-Signature"
    /// How far the timestamp may be from the server's clock, either way.
    public static let windowMs: Int64 = 5 * 60 * 1000

    /// The canonical bytes that are signed (Docs/envelope-v1.md §3.5).
    public static func statement(
        adminKey: SigningPublicKey,
        deploymentID: String,
        method: String,
        pathAndQuery: String,
        body: [UInt8],
        timestamp: UnixMillis,
        nonce: String
    ) -> [UInt8] {
        var w = CanonicalWriter(domain: "CareVault-admin-request-v2")
        w.append(adminKey.bytes)
        w.append(deploymentID)
        w.append(method.uppercased())
        w.append(pathAndQuery)
        w.append(try! BLAKE2b.hash(body))
        w.append(timestamp)
        w.append(nonce)
        return w.bytes
    }

    /// The three header values of a signed admin request.
    public struct Headers: Sendable, Equatable {
        public var timestamp: String
        public var nonce: String
        public var signature: String
    }

    /// The deployment id a server publishes (`GET /v1/deployment`): 16 bytes derived from the secret its
    /// database holds, as 22 base64url characters. Stable across restarts and instances of one deployment.
    public static func deploymentID(serverSecret: [UInt8]) -> String {
        var w = CanonicalWriter(domain: "CareVault-deployment-id-v1")
        w.append(serverSecret)
        return Base64URL.encode(try! BLAKE2b.hash(w.bytes, outputLength: 16))
    }

    /// Signs a request for the deployment `deploymentID` with a fresh nonce.
    public static func sign(
        method: String,
        pathAndQuery: String,
        body: [UInt8],
        timestamp: UnixMillis,
        deploymentID: String,
        adminKey: SigningKeyPair
    ) -> Headers {
        let nonce = Base64URL.encode(RandomBytes.bytes(count: 16))
        let bytes = statement(
            adminKey: adminKey.publicKey,
            deploymentID: deploymentID,
            method: method,
            pathAndQuery: pathAndQuery,
            body: body,
            timestamp: timestamp,
            nonce: nonce
        )
        let sig = adminKey.sign(bytes)
        return Headers(timestamp: String(timestamp), nonce: nonce, signature: sig.base64URL)
    }
}
