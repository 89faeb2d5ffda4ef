import Foundation
import VaultCrypto

/// Field groups that more than one signed statement covers, written in one place so the statements
/// cannot drift apart (Docs/envelope-v1.md §2, §3).
extension CanonicalWriter {
    /// Who an account is: user id, normalised username, role and public keys, as a certificate binds them
    /// and a registration asks for them.
    mutating func appendAccount(_ userID: UUID, _ username: String, _ role: Role, _ signingKey: SigningPublicKey, _ boxKey: BoxPublicKey) {
        append(userID)
        append(username)
        append(role.rawValue)
        append(signingKey)
        append(boxKey)
    }

    /// The password-hashing parameters and salt, as a registration signs them and a key bundle binds them
    /// into its associated data.
    mutating func append(_ kdf: KDFParameters, salt: Salt) {
        append(kdf.algorithm)
        append(kdf.opsLimit)
        append(kdf.memLimitBytes)
        append(salt)
    }
}
