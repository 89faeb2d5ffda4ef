import Foundation
import VaultCrypto

@testable import VaultCore

/// The fixed inputs of the test vectors in Docs/envelope-v1.md §7.4, built step by step from the spec
/// (not through `Envelope.seal`, whose nonce is random), so an independent client can repeat each step.
enum SpecVectors {
    static let owner = UUID(uuidString: "0F1E2D3C-4B5A-4978-8796-A5B4C3D2E1F0")!
    static let category = "interventions"
    static let epochKey = try! SymmetricKey(bytes: Array(0x00...0x1f))
    static let recordIDKey = try! SymmetricKey(bytes: Array(0x20...0x3f))
    static let signing = try! SigningKeyPair(seed: SecureBytes(copying: Array(0x40...0x5f)))

    /// An outcome of activity "walk", occurrence 3, with one yes/no value: the first envelope's payload.
    static let outcomePayload = Array(
        (#"{"outcome":{"activityID":"walk","createdAt":1700000000000,"occurrence":3,"removedValueIDs":[],"#
            + #""updatedAt":1700000000000,"values":[{"createdAt":1700000000000,"id":"v1","value":{"boolean":true,"type":"boolean"}}]},"#
            + #""type":"outcome"}"#).utf8
    )
    /// The tombstone of the same record: the second envelope's payload.
    static let tombstonePayload = Array(#"{"type":"outcome"}"#.utf8)

    static var tresorID: UUID { Tresor.id(ownerID: owner, category: category) }
    static var recordID: RecordID { RecordID.make(type: .outcome, activityID: "walk", occurrence: 3, key: recordIDKey) }

    /// The first envelope: the live outcome at HLC 1700000000123.0@dev-0001, nonce 0x60…0x77.
    static var first: Envelope {
        envelope(
            payload: outcomePayload,
            timestamp: HLCTimestamp(physicalMs: 1_700_000_000_123, counter: 0, deviceID: "dev-0001"),
            deleted: false,
            nonce: Array(0x60...0x77)
        )
    }

    /// The second envelope: the tombstone at HLC 1700000000456.1@dev-0002, nonce 0x80…0x97.
    static var second: Envelope {
        envelope(
            payload: tombstonePayload,
            timestamp: HLCTimestamp(physicalMs: 1_700_000_000_456, counter: 1, deviceID: "dev-0002"),
            deleted: true,
            nonce: Array(0x80...0x97)
        )
    }

    static func envelope(payload: [UInt8], timestamp: HLCTimestamp, deleted: Bool, nonce: [UInt8]) -> Envelope {
        let header = RecordHeader(
            ownerID: owner,
            tresorID: tresorID,
            category: category,
            epoch: 1,
            recordType: .outcome,
            recordID: recordID,
            timestamp: timestamp,
            deleted: deleted,
            authorID: owner
        )
        let ad = header.associatedData()
        let n = try! AEADNonce(bytes: nonce)
        // Both payloads are under 256 bytes: the smallest bucket, padded with 0x80 then zeros.
        let padded = payload + [0x80] + [UInt8](repeating: 0, count: 255 - payload.count)
        let ciphertext = AEAD.seal(padded, key: epochKey, nonce: n, associatedData: ad)
        let signature = signing.sign(Envelope.signedBytes(associatedData: ad, nonce: n, ciphertext: ciphertext))
        return Envelope(header: header, nonce: n, ciphertext: ciphertext, signature: signature)
    }

    /// Hex as the doc prints it (whitespace and line breaks ignored).
    static func bytes(hex: String) throws -> [UInt8] {
        try Hex.decode(String(hex.unicodeScalars.filter { !$0.properties.isWhitespace }))
    }

    /// The doc's text, read relative to this source file (Tests/VaultCoreTests -> project root -> Docs).
    static func doc(_ name: String) throws -> String {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Docs").appendingPathComponent(name)
        return try String(contentsOf: url, encoding: .utf8)
    }

    /// The hex of the fenced block that follows `marker` in `text`, joined without whitespace.
    static func hexBlock(after marker: String, in text: String) -> String? {
        guard let m = text.range(of: marker), let open = text.range(of: "```\n", range: m.upperBound..<text.endIndex),
            let close = text.range(of: "```", range: open.upperBound..<text.endIndex)
        else { return nil }
        return String(text[open.upperBound..<close.lowerBound].unicodeScalars.filter { !$0.properties.isWhitespace })
    }

    /// Hex in lines of 64 digits, as the doc prints it.
    static func lines(_ bytes: [UInt8]) -> String {
        let hex = Array(Hex.encode(bytes))
        return stride(from: 0, to: hex.count, by: 64).map { String(hex[$0..<min($0 + 64, hex.count)]) }.joined(separator: "\n")
    }
}
