import Foundation
import VaultCore

/// The admin's own record of every certificate it issued: username, user id, role and key fingerprint
/// (Docs/design.md §2). A hostile server can present the admin a second registration under a known name
/// (its own keys for "drbob") or a known id with new keys; the ledger refuses to certify either, whatever
/// the server says, so patients never seal keys to a key the admin did not mean to certify. The file lives
/// beside the admin's private key (mode 0600) and is written before a certificate leaves this process.
public actor CertificateLedger {
    /// One issued certificate.
    public struct Entry: Codable, Sendable, Equatable {
        public var username: String
        public var userID: UUID
        public var role: Role
        public var fingerprint: String
        public var issuedAt: UnixMillis
    }

    /// Where the ledger is kept.
    public nonisolated let url: URL
    private var entries: [Entry]

    /// The ledger at `url`; a missing file is an empty ledger, an unreadable one an error (never silently
    /// empty, which would forget what was issued).
    public init(url: URL) throws {
        self.url = url
        guard let data = try SecureFiles.read(url) else {
            entries = []
            return
        }
        do { entries = try JSONDecoder().decode([Entry].self, from: data) } catch {
            throw ClientError.localState("the certificate ledger \(url.path) is unreadable; restore it from a backup before approving anyone")
        }
    }

    /// The default place: `issued-certificates.json` beside the admin's private key file.
    public static func url(besideAdminKey keyFile: URL) -> URL {
        keyFile.deletingLastPathComponent().appendingPathComponent("issued-certificates.json")
    }

    /// What was issued before under `username` or `userID`, if anything.
    public func entry(username: String? = nil, userID: UUID? = nil) -> Entry? {
        entries.first { ($0.username == username) || ($0.userID == userID) }
    }

    /// Every issued certificate, oldest first.
    public func all() -> [Entry] { entries }

    /// Records `certificate` as issued, or refuses it when its name or id was certified before with
    /// anything different (another id, role or key). Re-issuing exactly the same identity is allowed (an
    /// approval that failed on the way to the server is retried that way).
    public func admit(_ certificate: Certificate) throws {
        let fingerprint = certificate.fingerprint
        for e in entries where e.username == certificate.username || e.userID == certificate.userID {
            guard e.username == certificate.username, e.userID == certificate.userID, e.role == certificate.role,
                e.fingerprint == fingerprint
            else {
                throw ClientError.integrity(
                    "refusing a second certificate: '\(e.username)' was certified before with id \(e.userID.uuidString.lowercased()) "
                        + "and key fingerprint \(e.fingerprint); this registration has id "
                        + "\(certificate.userID.uuidString.lowercased()) and fingerprint \(fingerprint)"
                )
            }
            return
        }
        entries.append(
            Entry(
                username: certificate.username,
                userID: certificate.userID,
                role: certificate.role,
                fingerprint: fingerprint,
                issuedAt: certificate.issuedAt
            )
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try SecureFiles.write(try encoder.encode(entries), to: url)
    }
}
