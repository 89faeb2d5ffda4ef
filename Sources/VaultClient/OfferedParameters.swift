import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// The answer of `/v1/auth/params`, read with the parameters unchecked so that a refusal can say what was
/// wrong with them in plain words, and checked here before any Argon2id work (Docs/envelope-v1.md §2).
struct OfferedParameters: Decodable {
    struct KDF: Decodable {
        var algorithm: String
        var opsLimit: UInt64
        var memLimitBytes: UInt64
    }

    var kdf: KDF
    var salt: Salt
    /// The signed parameters of the account's password change, when there was one (Docs/envelope-v1.md §2.4).
    var credentialParameters: CredentialParameters?

    /// The parameters and salt to derive under. With a profile of the account on this device (from its
    /// registration or an earlier login), its stored parameters and salt: a server offering weaker ones is
    /// refused, and others only when the account's own key signed them (a password change). Without one,
    /// the server's, which must lie between the floor and the ceiling.
    func check(
        against profile: Profile?,
        username: String,
        folder: String,
        expecting expected: (KDFParameters, Salt)? = nil
    ) throws -> (
        KDFParameters, Salt
    ) {
        if let (kdf, salt) = expected {
            guard self.kdf.algorithm == kdf.algorithm, self.kdf.opsLimit == kdf.opsLimit, self.kdf.memLimitBytes == kdf.memLimitBytes,
                self.salt == salt
            else {
                throw ClientError.integrity(
                    "the server offered other password-hashing parameters or salt for '\(username)' than the ones just set; refused"
                )
            }
            return (kdf, salt)
        }
        if let profile {
            let stored = profile.keyBundle
            let weaker = kdf.algorithm != stored.kdf.algorithm || kdf.opsLimit < stored.kdf.opsLimit || kdf.memLimitBytes < stored.kdf.memLimitBytes
            let shown = "\(kdf.algorithm)(ops: \(kdf.opsLimit), mem: \(kdf.memLimitBytes / 1_048_576) MiB)"
            if weaker {
                throw ClientError.integrity(
                    "the server offered weaker password-hashing parameters for '\(username)' (\(shown)) than this device stored "
                        + "(\(stored.kdf)); refused before deriving or sending anything"
                )
            }
            if let changed = try signedChange(for: profile, username: username) { return changed }
            guard kdf.opsLimit == stored.kdf.opsLimit, kdf.memLimitBytes == stored.kdf.memLimitBytes, salt == stored.salt else {
                throw ClientError.integrity(
                    "the server's password-hashing parameters or salt for '\(username)' differ from what this device stored; "
                        + "if the server was reset, remove the folder \(folder) and log in again"
                )
            }
            return (stored.kdf, stored.salt)
        }
        do { return (try KDFParameters(algorithm: kdf.algorithm, opsLimit: kdf.opsLimit, memLimitBytes: kdf.memLimitBytes), salt) } catch {
            throw ClientError.integrity("the server offered unacceptable password-hashing parameters: \(error)")
        }
    }

    /// The offered parameters and salt, when they differ from the stored ones, are not weaker (checked
    /// before) and come with a password change signed by the key the account's certificate names. A signed
    /// change older than the newest this device accepted is a replay (a server showing parameters the
    /// account left behind) and refused, as is a different change of the same instant.
    func signedChange(for profile: Profile, username: String) throws -> (KDFParameters, Salt)? {
        guard let update = credentialParameters, let certificate = profile.certificate, update.userID == profile.userID,
            update.kdf.algorithm == kdf.algorithm, update.kdf.opsLimit == kdf.opsLimit, update.kdf.memLimitBytes == kdf.memLimitBytes,
            update.salt == salt, update.kdf.opsLimit <= KDFParameters.maxOpsLimit, update.kdf.memLimitBytes <= KDFParameters.maxMemLimitBytes,
            update.isValid(signedBy: certificate.signingKey)
        else { return nil }
        if let newest = profile.credentialParameters,
            update.changedAt < newest.changedAt || (update.changedAt == newest.changedAt && update != newest)
        {
            throw ClientError.integrity(
                "the server offered a password change for '\(username)' made at \(update.changedAt), but this device already accepted one "
                    + "made at \(newest.changedAt): an older change replayed; refused before deriving or sending anything"
            )
        }
        return (update.kdf, update.salt)
    }

    /// The newest signed password change of the account to remember after a login that derived under
    /// `kdf` and `salt`: the offered one when it describes them, verifies under `certificate` and is newer
    /// than `stored`, else `stored`.
    func newestChange(stored: CredentialParameters?, kdf: KDFParameters, salt: Salt, userID: UUID, certificate: Certificate) -> CredentialParameters?
    {
        guard let offered = credentialParameters, offered.userID == userID, offered.kdf == kdf, offered.salt == salt,
            offered.changedAt > stored?.changedAt ?? .min, offered.isValid(signedBy: certificate.signingKey)
        else { return stored }
        return offered
    }
}
