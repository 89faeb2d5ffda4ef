import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

@testable import VaultClient

/// A server that answers binary pulls with pages it bends itself (Docs/envelope-v1.md §7.3): the real
/// server for every other request, and for `GET /v1/records` asking for a binary page, a page built from
/// the stored changes and handed to `bend` first. A broken frame must be one integrity failure (exit
/// status 65 in the tools) that applies nothing; one bad envelope, one quarantined change.
struct HostilePageServer: HTTPResponder {
    typealias Context = VaultRequestContext
    /// Turns the honest page's parts into the bytes sent; nil serves the honest page.
    typealias Bend = @Sendable (_ changes: [(sequence: UInt64, envelope: [UInt8]?)], _ done: Bool, _ next: UInt64) -> [UInt8]

    let inner: RouterResponder<VaultRequestContext>
    let repository: any VaultRepository
    let state: NIOLockedValueBox<(owner: UUID, bend: Bend)?>

    func respond(to request: Request, context: VaultRequestContext) async throws -> Response {
        guard request.method == .get, request.uri.path == Routes.records,
            RecordMediaType.names(request.headers[.accept], RecordMediaType.page),
            let (owner, bend) = state.withLockedValue({ $0 })
        else { return try await inner.respond(to: request, context: context) }
        let since = UInt64(request.uri.queryParameters.get("since") ?? "0") ?? 0
        let page = try await repository.page(ownerID: owner, tresorID: nil, since: since, limit: 1_000, maxBytes: PullPageBytes.default)
        let body = bend(page.changes.map { ($0.sequence, $0.envelope) }, page.done, page.changes.last?.sequence ?? since)
        return Response(status: .ok, headers: [.contentType: RecordMediaType.page], body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    /// A world whose server is this one; `state` starts honest.
    static func run(_ body: @escaping @Sendable (ClientWorld, NIOLockedValueBox<(owner: UUID, bend: Bend)?>) async throws -> Void) async throws {
        try await TestDatabase.with(.sqlite) { repo in
            let admin = SigningKeyPair.generate()
            let state = NIOLockedValueBox<(owner: UUID, bend: Bend)?>(nil)
            let server = HostilePageServer(
                inner: buildRouter(repository: repo, adminKey: admin.publicKey).buildResponder(),
                repository: repo,
                state: state
            )
            let app = Application(responder: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
            try await app.test(.live) { client in
                let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-hostile-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: root) }
                try await body(ClientWorld(repository: repo, baseURL: "http://127.0.0.1:\(client.port!)", admin: admin, root: root), state)
            }
        }
    }
}

@Suite("Client: a bent binary page")
struct HostilePageTests {
    /// The honest page's bytes.
    static func honest(_ changes: [(sequence: UInt64, envelope: [UInt8]?)], _ done: Bool, _ next: UInt64) -> [UInt8] {
        (try? PullPageFrame.encode(changes: changes, done: done, nextCursor: next)) ?? []
    }

    /// Puts a big-endian `u32` at `offset`.
    static func put(_ v: UInt32, at offset: Int, in bytes: inout [UInt8]) {
        for i in 0..<4 { bytes[offset + i] = UInt8(truncatingIfNeeded: v >> (24 - 8 * UInt32(i))) }
    }

    @Test func aBrokenFrameIsOneIntegrityFailureThatAppliesNothing() async throws {
        try await HostilePageServer.run { world, state in
            let (vaultA, password) = try await world.patient("pat", on: try world.device("a"))
            for id in ["walk", "run", "swim"] { try await vaultA.addActivity(try Sample.activity(id)) }
            _ = try await vaultA.sync()
            let owner = vaultA.account.profile.userID
            let bends: [(String, HostilePageServer.Bend, String)] = [
                ("trailing bytes", { Self.honest($0, $1, $2) + [0] }, "1 bytes follow the end of the page"),
                (
                    "a length past the end",
                    { changes, done, next in
                        var b = Self.honest(changes, done, next)
                        Self.put(.max, at: 8 + 9, in: &b)  // the first envelope's length
                        return b
                    }, "points past the end"
                ),
                (
                    "a sequence that does not increase",
                    { changes, done, next in
                        var bent = changes
                        bent[2].sequence = bent[1].sequence
                        return Self.honest(bent, done, next)
                    }, "out of order"
                ),
                ("a page that is not one", { _, _, _ in Array(#"{"changes":[]}"#.utf8) }, "does not start with the marker"),
            ]
            for (what, bend, words) in bends {
                state.withLockedValue { $0 = (owner, bend) }
                let vaultB = try await world.device("b-\(what.count)").loginPatient("pat", password: password)
                let error = await #expect(throws: ClientError.self, "\(what)") { _ = try await vaultB.sync() }
                guard case let .integrity(message)? = error else {
                    Issue.record("\(what): expected an integrity failure, got \(String(describing: error))")
                    continue
                }
                #expect(message.contains("page of changes is broken") && message.contains(words), "\(what): \(message)")
                #expect(try vaultB.store.cursor() == 0, "\(what): the cursor stayed")
                #expect(try await vaultB.activities().isEmpty, "\(what): nothing applied")
                #expect(try await vaultB.quarantined().isEmpty, "\(what): nothing quarantined either")
            }
        }
    }

    @Test func oneUndecodableEnvelopeIsQuarantinedAndTheRestApplied() async throws {
        try await HostilePageServer.run { world, state in
            let (vaultA, password) = try await world.patient("pat", on: try world.device("a"))
            for id in ["walk", "run", "swim"] { try await vaultA.addActivity(try Sample.activity(id)) }
            _ = try await vaultA.sync()
            let run = try #require(try vaultA.store.record(await vaultA.recordID(activity: "run"))).envelope
            state.withLockedValue {
                $0 = (
                    vaultA.account.profile.userID,
                    { changes, done, next in
                        Self.honest(changes.map { $0.envelope == run.binary ? ($0.sequence, StoredEnvelopeEdit.broken(run)) : $0 }, done, next)
                    }
                )
            }
            let vaultB = try await world.device("b").loginPatient("pat", password: password)
            let summary = try await vaultB.syncKeepingQuarantine()
            #expect(try await vaultB.activities().map(\.id) == ["swim", "walk"])
            #expect(summary.quarantined.map(\.reason) == [.malformed])
            #expect(summary.quarantined.map(\.recordID) == [run.header.recordID.hex], "named by the header that still reads")
            #expect(try vaultB.store.cursor() == 3)
            // The server turns honest: the next sync fetches the record again and heals.
            state.withLockedValue { $0 = nil }
            #expect(try await vaultB.sync().quarantined.isEmpty)
            #expect(try await vaultB.activities().map(\.id) == ["run", "swim", "walk"])
        }
    }

    /// An honest server ends a pull with a page that says it sent everything; an empty page that does not
    /// say so would skip the check of the commitments that final page carries. Both readers refuse it, with
    /// nothing of the pull's commitments accepted and the cursor where it was.
    @Test func anEmptyPageThatDoesNotSayDoneIsRefusedByBothReaders() async throws {
        try await HostilePageServer.run { world, state in
            let (vaultA, password) = try await world.patient("pat", on: try world.device("a"))
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            for id in ["walk", "run"] { try await vaultA.addActivity(try Sample.activity(id)) }
            _ = try await vaultA.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await vaultA.sync()
            let owner = vaultA.account.profile.userID
            let stalls: HostilePageServer.Bend = { _, _, next in Self.honest([], false, next) }
            state.withLockedValue { $0 = (owner, stalls) }
            let vaultB = try await world.device("b").loginPatient("pat", password: password)
            let patientError = await #expect(throws: ClientError.self) { _ = try await vaultB.sync() }
            #expect("\(String(describing: patientError))".contains("stopped sending changes"), "\(String(describing: patientError))")
            #expect(try vaultB.store.cursor() == 0)
            #expect(try vaultB.store.serverStates().commitments.isEmpty, "no commitment accepted")
            let doctorError = await #expect(throws: ClientError.self) { _ = try await doctor.view(patient: "pat") }
            #expect("\(String(describing: doctorError))".contains("stopped sending changes"), "\(String(describing: doctorError))")
            let tresor = Tresor.id(ownerID: owner, category: "interventions")
            #expect(try await doctor.cache.cursor(owner: owner, tresor: tresor) == 0)
            #expect(try await doctor.cache.acceptedCommitments(owner: owner).isEmpty, "no commitment accepted")
        }
    }

    /// The doctor's refresh stores one page while it checks the next (Docs/design.md §5): a page no cache can
    /// store (sequences past what SQLite holds) must stop the refresh at the next page, with nothing of it
    /// kept, even while the server keeps sending pages that say more follow.
    @Test func aPageTheCacheCannotStoreStopsTheDoctorsRefreshAtTheNextPage() async throws {
        try await HostilePageServer.run { world, state in
            let (vault, _) = try await world.patient("pat", on: try world.device("a"))
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            for id in ["walk", "run", "swim"] { try await vault.addActivity(try Sample.activity(id)) }
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            _ = try await vault.sync()
            let owner = vault.account.profile.userID
            let pages = NIOLockedValueBox<(count: Int, envelope: [UInt8]?)>((0, nil))
            state.withLockedValue {
                $0 = (
                    owner,
                    { changes, _, _ in
                        let (n, envelope) = pages.withLockedValue { p in
                            p.count += 1
                            p.envelope = p.envelope ?? changes.first?.envelope
                            return (p.count, p.envelope)
                        }
                        // An honest envelope at a sequence past Int64.max, and more to come, for 50 pages: then
                        // an empty last page, so a refresh that does not stop ends here and fails the count.
                        let sequence = UInt64(Int64.max) + UInt64(min(n, 50))
                        let last = n > 50
                        return (try? PullPageFrame.encode(changes: last ? [] : [(sequence, envelope)], done: last, nextCursor: sequence)) ?? []
                    }
                )
            }
            do {
                _ = try await doctor.view(patient: "pat")
                Issue.record("the doctor's view accepted pages it cannot store")
            } catch let e as ClientError {
                #expect("\(e)".contains("impossible sequence number"), "\(e)")
            }
            // Page 1 fails to store while page 2 is checked; page 3 may have been asked for meanwhile.
            #expect(pages.withLockedValue { $0.count } <= 3, "the refresh went on fetching after a store failed")
            let tresor = Tresor.id(ownerID: owner, category: "interventions")
            #expect(try await doctor.cache.cursor(owner: owner, tresor: tresor) == 0)
            #expect(try await doctor.cache.liveEnvelopes(owner: owner, tresor: tresor).isEmpty)
        }
    }
}
