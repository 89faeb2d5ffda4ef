import Hummingbird
import NIOCore

/// A page of changes, serialised without decoding the stored envelopes again: each envelope goes out
/// as the bytes a push stored (Docs/design.md §5), the one response not built by `VaultResponseEncoder`.
struct PullPage: ResponseGenerator {
    let rows: [ChangeRow]
    let limit: Int
    let since: UInt64
    /// The newest state commitments of the tresors the pull covers, sent on the final page only
    /// (Docs/envelope-v1.md §3.4), as the JSON the patient pushed.
    var commitments: [CommitmentRow] = []

    var nextCursor: UInt64 { rows.last?.sequence ?? since }
    var done: Bool { rows.count < limit }

    func response(from request: Request, context: some RequestContext) -> Response {
        VaultResponseEncoder.response(body())
    }

    func body() -> ByteBuffer {
        var b = ByteBuffer()
        b.reserveCapacity(rows.reduce(64) { $0 + $1.envelopeJSON.count + 40 } + commitments.reduce(0) { $0 + $1.json.count + 1 })
        b.writeString("{\"changes\":[")
        for (i, r) in rows.enumerated() {
            if i > 0 { b.writeString(",") }
            b.writeString("{\"sequence\":\(r.sequence),\"envelope\":")
            b.writeBytes(r.envelopeJSON)
            b.writeString("}")
        }
        b.writeString("],\"done\":\(done),\"nextCursor\":\(nextCursor)")
        // Only when there are some: the answer to an owner without commitments stays what older clients read.
        if done, !commitments.isEmpty {
            b.writeString(",\"commitments\":[")
            for (i, c) in commitments.enumerated() {
                if i > 0 { b.writeString(",") }
                b.writeBytes(c.json)
            }
            b.writeString("]")
        }
        b.writeString("}")
        return b
    }
}
