import Foundation
import Testing

@testable import VaultCLI

/// `StreamedJSON` writes what `Output.json` prints, byte for byte, without holding the document whole.
@Suite("Output: JSON written an element at a time")
struct StreamedJSONTests {
    struct Item: Encodable {
        var id: String
        var note: String
        var nested: [String: [Int]]
        var when: Date
        var empty: [String] = []
    }

    struct Plain: Encodable {
        var name: String
        var items: [Item]
        var others: [Item]
        var none: [Item]
        var tail: Int
    }

    struct Streamed: Encodable {
        var name: String
        var items: StreamedArray
        var others: StreamedArray
        var none: StreamedArray
        var tail: Int
    }

    /// What `stream` writes for `document`, read back from a file.
    static func written(_ stream: StreamedJSON, _ document: some Encodable, encoder: JSONEncoder? = nil) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("streamed-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: url) }
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        try stream.write(document, encoder: encoder, to: fd)
        return try String(contentsOf: url, encoding: .utf8)
    }

    @Test func theStreamIsByteForByteWhatTheWholeDocumentEncodesTo() throws {
        // Strings a record may carry: newlines, quotes, a lone placeholder-looking value, bidi and C1 marks.
        let hostile = ["line\nbreak \"quoted\"", "carevault-streamed-array-not-a-marker", "rtl\u{202E}mark\u{85}c1", "   spaced   "]
        // More than two blocks of elements encoded at once (`StreamedJSON.block`), the last one partial.
        let items = (0..<(2 * StreamedJSON.block + 300)).map { i in
            Item(id: "a\(i)", note: hostile[i % hostile.count], nested: ["x": [i, i + 1], "y": []], when: Date(timeIntervalSince1970: Double(i)))
        }
        let others = [Item(id: "solo", note: "", nested: [:], when: Date(timeIntervalSince1970: 0))]
        let plain = Plain(name: "pat \u{202E}", items: items, others: others, none: [], tail: 7)
        for encoder in [Output.encoder, Self.exportEncoder] {
            let stream = StreamedJSON()
            let document = Streamed(name: plain.name, items: stream.array(items), others: stream.array(others), none: stream.array([Item]()), tail: 7)
            let whole = Output.jsonText(try encoder.encode(plain)) + "\n"
            let streamed = try Self.written(stream, document, encoder: encoder)
            #expect(streamed == whole)
            #expect(streamed.contains("\\u202E"), "hostile marks are escaped in the streamed elements too")
        }
    }

    /// An element that cannot be encoded (a NaN, which JSONEncoder refuses) fails the write, whichever
    /// block it falls in, instead of leaving a hole in the output.
    @Test func anElementThatCannotBeEncodedFailsTheWrite() throws {
        struct Number: Encodable { var value: Double }
        let numbers = (0..<(StreamedJSON.block + 10)).map { Number(value: $0 == StreamedJSON.block + 3 ? .nan : Double($0)) }
        let stream = StreamedJSON()
        let document = ["numbers": stream.array(numbers)]
        #expect(throws: EncodingError.self) { _ = try Self.written(stream, document, encoder: Output.encoder) }
    }

    static let exportEncoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        e.dateEncodingStrategy = .iso8601
        return e
    }()
}
