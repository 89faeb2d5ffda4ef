import Foundation
import Hummingbird
import NIOCore
import VaultAPI
import VaultCore

/// A page of changes, serialised from the stored envelopes without decoding them again (Docs/design.md
/// §5): a binary page (Docs/envelope-v1.md §7.3), streamed in chunks. The one response not built by
/// `VaultResponseEncoder`.
struct PullPage: Sendable {
    let stored: StoredPage
    let since: UInt64

    var nextCursor: UInt64 { stored.changes.last?.sequence ?? since }
    var done: Bool { stored.done }

    /// How much of the page is gathered before it is handed to the connection.
    static let chunkBytes = 64 * 1024

    /// The binary page, written change by change into chunks of about `chunkBytes`, so the page is
    /// never held whole a second time beside the rows it is made of. Each envelope goes out as stored,
    /// except one stored as JSON before the binary encoding existed, which goes out in its binary encoding.
    func binaryResponse() -> Response {
        let changes = stored.changes.map { ChangeRow(sequence: $0.sequence, envelope: Self.binary($0.envelope)) }
        let head = PullPageFrame.head(count: changes.count)
        let tail = PullPageFrame.tail(done: done, nextCursor: nextCursor, commitments: done ? Self.decoded(stored.commitments) : [])
        let total = changes.reduce(head.count + tail.count) { $0 + PullPageFrame.changeCount(envelopeBytes: $1.envelope.count) }
        let body = ResponseBody(contentLength: total) { writer in
            var chunk = ByteBuffer(bytes: head)
            var change: [UInt8] = []
            for c in changes {
                change.removeAll(keepingCapacity: true)
                PullPageFrame.appendChange(sequence: c.sequence, envelope: c.envelope, to: &change)
                chunk.writeBytes(change)
                if chunk.readableBytes >= Self.chunkBytes {
                    try await writer.write(chunk)
                    chunk.clear()
                }
            }
            chunk.writeBytes(tail)
            try await writer.write(chunk)
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: [.contentType: RecordMediaType.page], body: body)
    }

    /// A stored envelope in its binary encoding. Versions pushed before that encoding are stored as the
    /// JSON of their time (first byte `{`, never 0x01) and are read in either form rather than rewritten:
    /// no stored byte of a signed version changes (Docs/design.md §5, §8). Bytes that do not decode go out as
    /// they are, and the client keeps that one change aside.
    static func binary(_ stored: [UInt8]) -> [UInt8] {
        guard stored.first == UInt8(ascii: "{"), let e = try? JSONDecoder().decode(Envelope.self, from: Data(stored)) else { return stored }
        return e.binary
    }

    /// The stored commitments (kept as the JSON the patient's device sent or the service wrote) as values
    /// for the binary page. One that no longer decodes is left out: a reader that saw its tresor's
    /// commitment before reports the absence as an integrity failure (Docs/envelope-v1.md §3.4).
    static func decoded(_ rows: [CommitmentRow]) -> [StateCommitment] {
        rows.compactMap { try? JSONDecoder().decode(StateCommitment.self, from: Data($0.json)) }
    }
}
