import Foundation
import VaultCore

/// A stored envelope edited as its JSON text, the way these tests play a hostile database operator. The
/// server stores the binary encoding (Docs/envelope-v1.md §7.1): the edit is made on the JSON form and
/// stored back in binary while it still reads as an envelope, else as the raw text, which no reader decodes.
/// (VaultClientTests has the same tool in VaultTestSupport, which this target does not link.)
enum StoredEnvelopeText {
    static func edit(_ stored: Data, _ change: (String) -> String) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let text = change(String(decoding: try encoder.encode(try Envelope(binary: Array(stored))), as: UTF8.self))
        guard let back = try? JSONDecoder().decode(Envelope.self, from: Data(text.utf8)) else { return Data(text.utf8) }
        return Data(back.binary)
    }
}
