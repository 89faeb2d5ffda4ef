import Foundation
import VaultCore
import VaultServer

/// Tampering with a stored envelope as a hostile database operator would, written as an edit of its JSON
/// text (the way such attacks read best: `"deleted":false` to `"deleted":true`). The edited text goes back
/// in the binary encoding the server stores (Docs/envelope-v1.md §7.1) when it still reads as an
/// envelope; an edit that breaks it stores the envelope with its ciphertext's length pointing past the
/// end instead: bytes that no reader decodes, whose header still names the record.
public enum StoredEnvelopeEdit {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// The stored bytes of `envelope` after replacing `from` by `to` in its JSON text.
    public static func edited(_ envelope: Envelope, from: String, to: String) throws -> [UInt8] {
        let text = String(decoding: try encoder.encode(envelope), as: UTF8.self).replacingOccurrences(of: from, with: to)
        guard let back = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)) else { return broken(envelope) }
        return back.binary
    }

    /// `envelope`'s binary encoding with the high byte of its ciphertext's length set: it no longer decodes.
    public static func broken(_ envelope: Envelope) -> [UInt8] {
        var bytes = envelope.binary
        let header = envelope.binaryCount - 12 - 24 - 64 - envelope.ciphertext.count
        bytes[header + 4 + 24] = 0xff
        return bytes
    }

}

extension VaultRepository {
    /// Rewrites the stored envelope of `envelope`'s version with `StoredEnvelopeEdit.edited` (tests only).
    public func attackerEdits(_ backend: Backend, _ envelope: Envelope, from: String, to: String) async throws {
        try await databaseOperator.replaceStoredEnvelope(of: envelope.versionID, with: try StoredEnvelopeEdit.edited(envelope, from: from, to: to))
    }
}
