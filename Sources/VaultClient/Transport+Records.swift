import Foundation
import NIOHTTP1
import VaultAPI
import VaultCore

/// The binary record bodies (Docs/envelope-v1.md §7.2, §7.3), the only ones the records route takes: a
/// push sends a batch, a pull asks for a page. Every other request is JSON both ways.
extension Transport {
    /// What a request's body is and which answer it asks for.
    struct Media: Sendable {
        var body: String
        var accept: String
        /// JSON both ways: every route but the records.
        static let json = Media(body: RecordMediaType.json, accept: RecordMediaType.json)
    }

    /// Pushes a binary batch (§7.2) and decodes the server's JSON answer.
    func push(batch: [UInt8], auth: Auth) async throws -> PushResponse {
        let media = Media(body: RecordMediaType.batch, accept: RecordMediaType.json)
        let answer = try await sendRaw(.POST, Routes.records, payload: batch, auth: auth, media: media)
        // The common answer is read directly (PushResponse+Direct); any other goes through JSONDecoder.
        try Self.requireJSON(answer, .POST, Routes.records)
        if let response = PushResponse.direct(from: answer.body) { return response }
        return try Self.decode(answer, .POST, Routes.records)
    }

    /// One page of `GET /v1/records` with `query` that must follow `cursor`, in binary (§7.3), with the
    /// commitments of a final page. An answer that is not a page, or whose framing fails, is one
    /// integrity failure that applies nothing.
    func pullPage(query: String, after cursor: UInt64, auth: Auth) async throws -> (page: PulledPage, commitments: [StateCommitment]) {
        let media = Media(body: RecordMediaType.json, accept: RecordMediaType.page)
        let answer = try await sendRaw(.GET, Routes.records + query, payload: [], auth: auth, media: media)
        guard RecordMediaType.names(answer.contentType, RecordMediaType.page) else {
            let got = answer.contentType.map { "'\(ClientError.printable($0, limit: 60))'" } ?? "no content type"
            throw ClientError.unreadableAnswer("expected a page of changes from GET \(Routes.records); got \(got)")
        }
        let frame: PullPageFrame
        do { frame = try PullPageFrame(bytes: answer.body, after: cursor) } catch {
            throw ClientError.integrity("the server's page of changes is broken: \(error)")
        }
        return (PulledPage(frame), frame.commitments)
    }
}
