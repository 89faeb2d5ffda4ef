import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

extension APIClient {
    /// A push of `body` as a binary batch (Docs/envelope-v1.md §7.2).
    func pushBatch(_ patient: TestUser, _ body: [UInt8]) async throws -> TestResponse {
        try await send(.post, Routes.records, token: patient.token, rawBody: body, contentType: RecordMediaType.batch)
    }

    /// A pull asking for the binary page (§7.3).
    func pullPage(_ token: String, since: UInt64 = 0, limit: Int? = nil, maxBytes: Int? = nil) async throws -> TestResponse {
        var query = "?since=\(since)"
        if let limit { query += "&limit=\(limit)" }
        if let maxBytes { query += "&maxBytes=\(maxBytes)" }
        let headers: HTTPFields = [.authorization: "Bearer \(token)", .careVaultClient: CareVaultVersion.release, .accept: RecordMediaType.page]
        return try await client.execute(uri: Routes.records + query, method: .get, headers: headers, body: nil)
    }

    /// A patient with a declared tresor.
    func patientWithTresor(_ name: String = "pat") async throws -> (TestUser, Tresor) {
        let patient = try await user(name, role: .patient)
        let tresor = Tresor.create(ownerID: patient.id, category: "interventions")
        #expect(try await declareTresor(patient, tresor).status == .ok)
        return (patient, tresor)
    }

    /// `count` envelopes of `payloadBytes` each, for distinct records.
    func envelopes(_ patient: TestUser, _ tresor: Tresor, count: Int, payloadBytes: Int = 40, prefix: String = "r") throws -> [Envelope] {
        let filler = String(repeating: "x", count: payloadBytes)
        return try (0..<count).map { try envelope(patient, tresor, record: "\(prefix)\($0)", payload: filler) }
    }

    /// Pushes `envelopes` as binary batches of at most 2,000, expecting every one stored.
    func pushAll(_ patient: TestUser, _ envelopes: [Envelope], batch: Int = 2_000) async throws {
        for start in stride(from: 0, to: envelopes.count, by: batch) {
            let r = try await pushBatch(patient, try EnvelopeFrame.encode(Array(envelopes[start..<min(start + batch, envelopes.count)])))
            #expect(r.status == .ok)
            #expect(try decode(PushResponse.self, r).results.allSatisfy { $0.status == .stored })
        }
    }

    /// Every binary page from `since` on; each must be a well-formed page after the cursor it was asked after.
    func pullPages(_ token: String, limit: Int? = nil, maxBytes: Int? = nil) async throws -> [(bytes: Int, page: PullPageFrame)] {
        var cursor: UInt64 = 0
        var pages: [(Int, PullPageFrame)] = []
        while true {
            let r = try await pullPage(token, since: cursor, limit: limit, maxBytes: maxBytes)
            #expect(r.status == .ok && r.headers[.contentType] == RecordMediaType.page)
            let bytes = Array(r.body.readableBytesView)
            let page = try PullPageFrame(bytes: bytes, after: cursor)
            pages.append((bytes.count, page))
            if page.done || pages.count > 100 { return pages }
            cursor = page.nextCursor
        }
    }
}

/// The binary wire (Docs/envelope-v1.md §7.2, §7.3): a push batch is refused whole when any part of it is
/// malformed, the stored bytes are the pushed bytes, and pages are bounded in changes and in bytes.
@Suite("API: binary push batches and pull pages")
struct APIBinaryWireTests {
    @Test(arguments: Backend.allCases)
    func aBatchIsStoredAsSentAndServedByteForByte(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 3)
            // The commitment to the heads the batch leaves: the server checks the batch by it.
            let (commitment, _) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes)
            let pushed = try await api.pushBatch(patient, try EnvelopeFrame.encode(envelopes, commitments: [commitment]))
            #expect(pushed.status == .ok)
            #expect(try api.decode(PushResponse.self, pushed).results.map(\.versionID) == envelopes.map(\.versionID))

            let stored = try await api.repository.changes(ownerID: patient.id, tresorID: nil, since: 0, limit: 10)
            #expect(stored.map(\.envelope) == envelopes.map(\.binary), "the server keeps the bytes it received")
            let r = try await api.pullPage(patient.token)
            let page = try PullPageFrame(bytes: Array(r.body.readableBytesView), after: 0)
            #expect(page.changes.compactMap { page.envelopeBytes(of: $0).map(Array.init) } == envelopes.map(\.binary))
            #expect(page.done && page.nextCursor == 3 && page.commitments == [commitment])
        }
    }

    /// The JSON record wire is gone (Docs/design.md §8): a push that is not a batch is 415, a pull that does
    /// not accept the page is 406, each with the API's error body saying what to send, and nothing stored.
    @Test(arguments: Backend.allCases)
    func jsonRecordBodiesAreRefusedClearly(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 2)
            let json = Array(try APIClient.encoder.encode(["envelopes": envelopes]))
            for contentType in ["application/json", nil, "text/plain"] {
                let r = try await api.send(.post, Routes.records, token: patient.token, rawBody: json, contentType: contentType)
                #expect(r.status == .unsupportedMediaType && api.errorCode(r) == .unsupportedMediaType, "\(contentType ?? "none")")
                let message = try api.decode(APIErrorBody.self, r).error.message
                #expect(message.contains(RecordMediaType.batch) && message.contains("upgrade the client"), "\(message)")
            }
            #expect(try await api.repository.changes(ownerID: patient.id, tresorID: nil, since: 0, limit: 10).isEmpty, "nothing stored")
            try await api.pushAll(patient, envelopes)

            for accept in ["application/json", "text/*", "application/vnd.carevault.batch"] {
                let r = try await api.send(.get, Routes.records + "?since=0", token: patient.token, contentType: nil, accept: accept)
                #expect(r.status == .notAcceptable && api.errorCode(r) == .unsupportedMediaType, "\(accept)")
                #expect(r.headers[.contentType] == "application/json")
                let message = try api.decode(APIErrorBody.self, r).error.message
                #expect(message.contains("Accept: \(RecordMediaType.page)") && message.contains("upgrade the client"), "\(message)")
            }
            // The page is there for a client that asks for it, with parameters or beside other types, and
            // for one that accepts any type (no Accept, as HTTP reads it, or a range that covers it).
            for accept in [
                nil, "*/*", "application/*", RecordMediaType.page, "application/json;q=0.5, \(RecordMediaType.page)", "\(RecordMediaType.page); q=1",
            ] {
                let r = try await api.send(.get, Routes.records + "?since=0", token: patient.token, contentType: nil, accept: accept)
                #expect(try api.page(r).changes.map(\.envelope) == envelopes, "\(accept ?? "none")")
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func oneBadEnvelopeRefusesTheWholeBatchNamingItsIndex(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            var binaries = try api.envelopes(patient, tresor, count: 4).map(\.binary)
            binaries[2][binaries[2].count - 65] = 63  // the signature's length prefix says 63 bytes
            let r = try await api.pushBatch(patient, try EnvelopeFrame.encode(binaries: binaries))
            #expect(r.status == .badRequest && api.errorCode(r) == .badRequest)
            let message = try api.decode(APIErrorBody.self, r).error.message
            #expect(message == "envelope 2 of the batch (counting from 0): envelope is malformed: the signature is 63 bytes, not 64")
            #expect(try await api.repository.changes(ownerID: patient.id, tresorID: nil, since: 0, limit: 10).isEmpty, "nothing stored")
        }
    }

    @Test func brokenFramesAreRefusedWithTheIndexAndStoreNothing() async throws {
        try await APIHarness.run(.sqlite) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 3)
            let frame = try EnvelopeFrame.encode(envelopes)
            let second = 8 + 4 + envelopes[0].binaryCount
            var pastTheEnd = frame
            pastTheEnd[second + 1] = 0x7f  // envelope 1's length now points far past the end
            var tooMany = frame
            tooMany[4...7] = [0, 0, 0x07, 0xd1]
            let cases: [(String, [UInt8], HTTPResponse.Status, String)] = [
                ("truncated inside envelope 1", Array(frame.prefix(second + 100)), .badRequest, "envelope 1"),
                ("length past the end", pastTheEnd, .badRequest, "the length of the envelope 1"),
                ("trailing bytes", frame + [0, 0, 0], .badRequest, "3 bytes follow the end of the batch"),
                ("JSON under the batch type", Array(#"{"envelopes":[]}"#.utf8), .badRequest, "it looks like JSON"),
                ("count past the limit", tooMany, .contentTooLarge, "at most 2000"),
            ]
            for (what, body, status, words) in cases {
                let r = try await api.pushBatch(patient, body)
                #expect(r.status == status, "\(what)")
                let message = try api.decode(APIErrorBody.self, r).error.message
                #expect(message.contains(words), "\(what): \(message)")
            }
            #expect(try await api.repository.changes(ownerID: patient.id, tresorID: nil, since: 0, limit: 10).isEmpty, "nothing stored")
            // The body limit is the frame's limit: one byte more never reaches the decoder.
            #expect(APILimits.maxBodyBytes == EnvelopeFrame.maxBytes)
            let big = try await api.pushBatch(patient, EnvelopeFrame.magic + [UInt8](repeating: 0, count: EnvelopeFrame.maxBytes))
            #expect(big.status == .contentTooLarge && api.errorCode(big) == .payloadTooLarge)
        }
    }

    @Test(arguments: Backend.allCases)
    func pagesOfLargeRecordsStayUnderTheByteBound(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 48, payloadBytes: 100 * 1024)
            try await api.pushAll(patient, envelopes, batch: 16)
            // The default bound (4 MiB) and one asked for (512 KiB): more pages, each under it, every record.
            for bound in [nil, 512 * 1024] {
                let pages = try await api.pullPages(patient.token, maxBytes: bound)
                let limit = bound ?? PullPageBytes.default
                #expect(pages.allSatisfy { $0.bytes <= limit }, "every page under \(limit) bytes: \(pages.map(\.bytes))")
                #expect(pages.count >= envelopes.count * 100 * 1024 / limit + 1)
                let received = pages.flatMap { p in p.page.changes.map { try? p.page.envelope(of: $0) } }
                #expect(received == envelopes)
            }
            // A record larger than the bound still moves the cursor: one per page.
            let single = try await api.pullPages(patient.token, limit: 5, maxBytes: 64 * 1024)
            #expect(single.count == envelopes.count && single.allSatisfy { $0.page.changes.count == 1 })
        }
    }

    @Test func aPullOfMorePagesThanFitInOne() async throws {
        try await APIHarness.run(.sqlite) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 12_000, payloadBytes: 8)
            try await api.pushAll(patient, envelopes)
            let pages = try await api.pullPages(patient.token, limit: 5_000)
            #expect(pages.map(\.page.changes.count) == [5_000, 5_000, 2_000])
            #expect(pages.map(\.page.done) == [false, false, true])
            let sequences = pages.flatMap { $0.page.changes.map(\.sequence) }
            #expect(sequences == Array(1...12_000))
            let ids = Set(pages.flatMap { p in p.page.changes.compactMap { try? p.page.envelope(of: $0).versionID } })
            #expect(ids == Set(envelopes.map(\.versionID)))
        }
    }
}
