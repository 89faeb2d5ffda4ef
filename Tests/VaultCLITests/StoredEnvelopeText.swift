import Foundation
import VaultCore

/// A stored envelope edited as its JSON text, the way these tests play a hostile database operator. The
/// server stores the binary encoding (Docs/envelope-v1.md §7.1): the edit is made on the JSON form and
/// stored back in binary while it still reads as an envelope, else as the envelope with its ciphertext's
/// length pointing past the end, which no reader decodes but whose header still names the record.
/// (VaultClientTests has the same tool in VaultTestSupport, which this target does not link.)
enum StoredEnvelopeText {
    static func edit(_ stored: Data, _ change: (String) -> String) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let envelope = try Envelope(binary: Array(stored))
        let text = change(String(decoding: try encoder.encode(envelope), as: UTF8.self))
        guard let back = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)) else {
            var bytes = envelope.binary
            bytes[envelope.binaryCount - 100 - envelope.ciphertext.count + 28] = 0xff
            return Data(bytes)
        }
        return Data(back.binary)
    }
}
