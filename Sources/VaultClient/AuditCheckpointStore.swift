import Foundation
import VaultCore
import VaultCrypto

/// The newest audit checkpoint this device has verified or signed (Docs/design.md §6), kept in a file so a
/// server that later drops checkpoints, or rolls its log back to before one, is caught: the server's list
/// must still hold it and the chain must still reach it. The admin keeps it beside the private key (like
/// `CertificateLedger`), a patient in its account folder.
public struct AuditCheckpointStore: Sendable {
    /// Where the checkpoint is kept.
    public let url: URL

    /// The store at `url`; nothing is read until `newest()`.
    public init(url: URL) { self.url = url }

    /// The default place for the admin: `audit-checkpoint.json` beside the admin's private key file.
    public static func url(besideAdminKey keyFile: URL) -> URL {
        keyFile.deletingLastPathComponent().appendingPathComponent("audit-checkpoint.json")
    }

    /// The remembered checkpoint; nil when none was ever kept. An unreadable file is an error, never
    /// silently nothing, which would forget what was seen.
    public func newest() throws -> AuditCheckpoint? {
        guard let data = try SecureFiles.read(url) else { return nil }
        do { return try JSONDecoder().decode(AuditCheckpoint.self, from: data) } catch {
            throw ClientError.localState("the audit checkpoint file \(url.path) is unreadable; restore it from a backup or remove it")
        }
    }

    /// Keeps `checkpoint` when it is newer than the remembered one (a higher sequence); older ones change nothing.
    public func remember(_ checkpoint: AuditCheckpoint) throws {
        if let known = try newest(), known.sequence >= checkpoint.sequence { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try SecureFiles.write(try encoder.encode(checkpoint), to: url)
    }
}
