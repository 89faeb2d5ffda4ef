import Foundation
import VaultClient
import VaultCore

/// A JSON document whose large arrays are encoded an element at a time as it is written, so that a view
/// of 100,000 records never exists in memory as one encoded document (Docs/benchmarks.md §7). The output
/// is byte for byte what `Output.json` prints for the same value: the document is encoded with a
/// placeholder in each non-empty array, and each placeholder's line is replaced by the array's elements,
/// each encoded on its own and indented to the placeholder's depth (the pretty printer indents nested
/// values by whole lines, leaves the blank line of an empty array unindented, and escapes every newline
/// inside a string, so re-indenting lines is exact).
public final class StreamedJSON {
    private var arrays: [String: (count: Int, encode: (Int, JSONEncoder) throws -> Data)] = [:]

    public init() {}

    /// `elements` as an array of the document, written an element at a time.
    public func array<Element: Encodable>(_ elements: [Element]) -> StreamedArray {
        // A placeholder no value of the document can hold: a random id made now.
        let marker = "carevault-streamed-array-\(UUID().uuidString)"
        // Activities and outcomes under `Output.encoder` are written directly where `DirectJSON` can.
        let direct: ((Int) -> [UInt8]?)? =
            if let activities = elements as? [Activity] {
                { DirectJSON.activity(activities[$0]) }
            } else if let outcomes = elements as? [Outcome] {
                { DirectJSON.outcome(outcomes[$0]) }
            } else {
                nil
            }
        arrays[marker] = (
            elements.count,
            { i, encoder in
                if encoder === Output.encoder, let bytes = direct?(i) { return Data(bytes) }
                return try encoder.encode(elements[i])
            }
        )
        return StreamedArray(marker: elements.isEmpty ? nil : marker)
    }

    /// `write` to standard output, after what `print` buffered there.
    public func writeToStandardOutput(_ document: some Encodable, encoder: JSONEncoder? = nil) throws {
        fflush(nil)
        try write(document, encoder: encoder, to: STDOUT_FILENO)
    }

    /// Writes `document` (holding arrays made by `array`) to `fd` as `Output.json` prints it (the text
    /// escaped by `Output.jsonText`), ending with a newline.
    public func write(_ document: some Encodable, encoder: JSONEncoder? = nil, to fd: Int32) throws {
        let encoder = encoder ?? Output.encoder
        var out = BufferedOutput(fd: fd)
        let text = String(decoding: try encoder.encode(document), as: UTF8.self)
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let indent = line.prefix { $0 == " " }
            let body = line.dropFirst(indent.count)
            guard body.hasPrefix("\""), body.hasSuffix("\""), let array = arrays[String(body.dropFirst().dropLast())] else {
                try out.append(Output.jsonText(Data(line.utf8)) + "\n")
                continue
            }
            let margin = Array(indent.utf8)
            // Elements are encoded a block at a time on every core, and written in order.
            for block in stride(from: 0, to: array.count, by: Self.block) {
                let range = block..<min(block + Self.block, array.count)
                for (offset, element) in try Self.encoded(range, array.encode, encoder: encoder, margin: margin).enumerated() {
                    try out.append(element)
                    try out.append(range.lowerBound + offset < array.count - 1 ? ",\n" : "\n")
                }
            }
        }
        try out.flush()
    }

    /// How many elements are encoded at once.
    public static let block = 512

    /// The elements at `range`, each encoded, escaped as `Output.jsonText` and indented by `margin` (each
    /// line, but for the blank line of an empty array), on every core; the first error thrown, if any.
    private static func encoded(
        _ range: Range<Int>,
        _ encode: (Int, JSONEncoder) throws -> Data,
        encoder: JSONEncoder,
        margin: [UInt8]
    ) throws -> [[UInt8]] {
        var out = [[UInt8]](repeating: [], count: range.count)
        var failures = [(any Error)?](repeating: nil, count: range.count)
        out.withUnsafeMutableBufferPointer { slots in
            failures.withUnsafeMutableBufferPointer { errors in
                // Each iteration writes its own slot only; `encode` reads the caller's elements, which nothing changes meanwhile.
                nonisolated(unsafe) let slots = slots
                nonisolated(unsafe) let errors = errors
                nonisolated(unsafe) let encode = encode
                DispatchQueue.concurrentPerform(iterations: range.count) { k in
                    do {
                        let element = Output.jsonText(try encode(range.lowerBound + k, encoder)).utf8
                        var bytes = margin
                        bytes.reserveCapacity(element.count + margin.count * 8)
                        var previous: UInt8 = 0
                        for byte in element {
                            if previous == UInt8(ascii: "\n"), byte != UInt8(ascii: "\n") { bytes += margin }
                            bytes.append(byte)
                            previous = byte
                        }
                        slots[k] = bytes
                    } catch {
                        errors[k] = error
                    }
                }
            }
        }
        if let failure = failures.lazy.compactMap({ $0 }).first { throw failure }
        return out
    }
}

/// An array of a `StreamedJSON` document: encoded on its own it is a placeholder (or empty).
public struct StreamedArray: Encodable {
    let marker: String?

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.unkeyedContainer()
        if let marker { try container.encode(marker) }
    }
}

/// Bytes written to a file descriptor in blocks of 64 KiB.
struct BufferedOutput {
    let fd: Int32
    private var buffer: [UInt8] = []

    init(fd: Int32) {
        self.fd = fd
        buffer.reserveCapacity(1 << 16)
    }

    mutating func append(_ text: String) throws {
        try append(text.utf8)
    }

    mutating func append(_ bytes: some Sequence<UInt8>) throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 16 { try flush() }
    }

    mutating func append(_ byte: UInt8) throws {
        buffer.append(byte)
        if buffer.count >= 1 << 16 { try flush() }
    }

    mutating func flush() throws {
        if let failure = buffer.withUnsafeBytes({ SecureFiles.writeAll($0, to: fd) }) {
            throw CLIError("cannot write the output: \(String(cString: strerror(failure)))", status: .other)
        }
        buffer.removeAll(keepingCapacity: true)
    }
}
