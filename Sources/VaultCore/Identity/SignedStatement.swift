import Foundation
import VaultCrypto

/// A statement signed by one key over its canonical bytes (Docs/envelope-v1.md §3): certificates,
/// registrations, grants and approvals. Each is built unsigned, then signed here, so the signature always
/// covers exactly the bytes a verifier recomputes from the finished value.
protocol SignedStatement {
    /// The canonical bytes the signature covers.
    var statementBytes: [UInt8] { get }
    /// The signature over `statementBytes`.
    var signature: Signature { get set }
}

extension SignedStatement {
    /// This statement with `signature` made by `key` over its `statementBytes`.
    func signed(by key: SigningKeyPair) -> Self {
        var s = self
        s.signature = key.sign(statementBytes)
        return s
    }
}

extension Signature {
    /// The placeholder a statement carries until `signed(by:)` replaces it; it verifies under no key.
    static var unsigned: Signature { Signature(uncheckedBytes: [UInt8](repeating: 0, count: 64)) }
}
