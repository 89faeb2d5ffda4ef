import Foundation
import VaultCore

/// The answer to a push, written and read without Foundation's JSON coders where it takes its common form:
/// every result stored or a duplicate, with a version id of letters and digits. For 500 results each coder
/// costs about 2 ms, on the path between one batch and the next (Docs/benchmarks.md §2). The JSON is the
/// same either way (openapi.yaml `PushResponse`); any other answer goes through `JSONEncoder`/`JSONDecoder`.
extension PushResponse {
    /// The bytes the server's JSON encoder (sorted keys, slashes not escaped) writes for this answer, or
    /// nil when a result has a code or a reason, or a version id with any character other than a letter
    /// or a digit.
    public func directJSON() -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(14 + results.count * 112)
        out.append(contentsOf: #"{"results":["#.utf8)
        for (i, r) in results.enumerated() {
            guard r.code == nil, r.reason == nil, r.versionID.utf8.allSatisfy(Self.isPlain) else { return nil }
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            if let sequence = r.sequence { out.append(contentsOf: #""sequence":\#(sequence),"#.utf8) }
            out.append(contentsOf: #""status":"\#(r.status.rawValue)","versionID":"\#(r.versionID)"}"#.utf8)
        }
        out.append(contentsOf: "]}".utf8)
        return out
    }

    /// The answer in `bytes` when every result holds only a version id, a status and a sequence (what
    /// `directJSON` writes, in any key order and spacing), each key once; nil otherwise, and then
    /// `JSONDecoder` reads it. Where this returns an answer it is the one `JSONDecoder` returns.
    public static func direct(from bytes: [UInt8]) -> PushResponse? {
        bytes.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            var results: [PushResult]?
            var seen: UInt8 = 0
            var first = true
            guard s.openObject() else { return nil }
            while let key = s.nextKey(&first) {
                guard key == "results", s.mark(&seen, 1), let read = s.array({ result(&$0) }) else { return nil }
                results = read
            }
            guard !s.failed, let results, s.atEnd() else { return nil }
            return PushResponse(results: results)
        }
    }

    private static func result(_ s: inout JSONScanner) -> PushResult? {
        var versionID: String?
        var status: PushResult.Status?
        var sequence: UInt64?
        var seen: UInt8 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "versionID":
                guard s.mark(&seen, 1), let text = s.string() else { return nil }
                versionID = text
            case "status":
                guard s.mark(&seen, 2), let text = s.string(), let value = PushResult.Status(rawValue: text) else { return nil }
                status = value
            case "sequence":
                guard s.mark(&seen, 4), let value = s.unsigned() else { return nil }
                sequence = value
            default:
                return nil
            }
        }
        guard !s.failed, let versionID, let status else { return nil }
        return PushResult(versionID: versionID, status: status, sequence: sequence)
    }

    private static func isPlain(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "z"))
    }
}
