import Foundation
import VaultCore

/// The certificates this device has sealed keys to, pinned on first use per username (Docs/design.md §2).
/// A certificate only proves the admin signed it; if the admin (or a server that tricked the admin) ever
/// certifies a second key under a name this device already trusts, the change is refused here until a
/// person confirms the new fingerprint (`PatientVault.confirmCertificateChange`), so keys are never sealed
/// to a substituted key without someone noticing.
struct CertificatePins {
    /// One pinned certificate.
    struct Pin: Codable, Equatable {
        var userID: UUID
        var fingerprint: String
    }

    let url: URL
    private(set) var pins: [String: Pin]

    /// The pins of the profile in `store`; an unreadable file is an error, never an empty set.
    init(store: ProfileStore) throws {
        url = store.folder.appendingPathComponent("pinned-certificates.json")
        guard let data = try SecureFiles.read(url) else {
            pins = [:]
            return
        }
        do { pins = try JSONDecoder().decode([String: Pin].self, from: data) } catch {
            throw ClientError.localState("the pinned certificates at \(url.path) are unreadable; restore or remove the file deliberately")
        }
    }

    /// Pins `certificate` on first use; refuses one whose id or key differs from the pinned one.
    mutating func check(_ certificate: Certificate) throws {
        let seen = Pin(userID: certificate.userID, fingerprint: certificate.fingerprint)
        guard let pinned = pins[certificate.username] else {
            try pin(certificate.username, seen)
            return
        }
        guard pinned == seen else {
            throw ClientError.integrity(
                "the key of '\(certificate.username)' changed: this device pinned fingerprint \(pinned.fingerprint), the server now "
                    + "presents \(seen.fingerprint). Nothing was shared. If \(certificate.username) really has a new key, check the "
                    + "new fingerprint with them and confirm it (share trust --doctor \(certificate.username) --fingerprint "
                    + "\(seen.fingerprint))"
            )
        }
    }

    /// Replaces the pin of `certificate.username` by `certificate` (after a person confirmed it).
    mutating func replace(with certificate: Certificate) throws {
        try pin(certificate.username, Pin(userID: certificate.userID, fingerprint: certificate.fingerprint))
    }

    private mutating func pin(_ username: String, _ pin: Pin) throws {
        pins[username] = pin
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try SecureFiles.write(try encoder.encode(pins), to: url)
    }
}
