import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

@testable import VaultClient

/// A server whose listings (`/v1/admin/users`, `/v1/admin/pending`, `/v1/doctor/patients`, `/v1/sessions`)
/// stop advancing: from the second page on, each page says it is not the last and hands back the cursor it
/// was given. A client that trusted it would ask for the same page forever.
struct HostileListingServer: HTTPResponder {
    typealias Context = VaultRequestContext
    static let paths: Set<String> = [Routes.adminUsers, Routes.adminPending, Routes.doctorPatients, Routes.sessions]

    let inner: RouterResponder<VaultRequestContext>

    func respond(to request: Request, context: VaultRequestContext) async throws -> Response {
        let honest = try await inner.respond(to: request, context: context)
        let query = request.uri.queryParameters
        guard request.method == .get, Self.paths.contains(request.uri.path), honest.status == .ok,
            query.get("after") != nil || query.get("sharesAfter") != nil
        else { return honest }
        let collected = HostileShareServer.Collected()
        try await honest.body.write(HostileShareServer.CollectingWriter(into: collected))
        let body = Data(collected.bytes.withLockedValue { $0 })
        guard var page = try JSONSerialization.jsonObject(with: body) as? [String: Any] else { return honest }
        page["done"] = false
        if let after = query.get("after") { page["nextCursor"] = after }
        if let after = query.get("sharesAfter") { page["nextShareCursor"] = after }
        let bent = try JSONSerialization.data(withJSONObject: page)
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: bent)))
    }

    static func run(_ body: @escaping @Sendable (ClientWorld) async throws -> Void) async throws {
        try await TestDatabase.with(.sqlite) { repo in
            let admin = SigningKeyPair.generate()
            let server = HostileListingServer(inner: buildRouter(repository: repo, adminKey: admin.publicKey).buildResponder())
            let app = Application(responder: server, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
            try await app.test(.live) { client in
                let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-listing-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: root) }
                try await body(ClientWorld(repository: repo, baseURL: "http://127.0.0.1:\(client.port!)", admin: admin, root: root))
            }
        }
    }
}

@Suite("Client: listings read every page")
struct ListingPagesTests {
    /// Two patients sharing with one doctor, who logged in on two devices; one registration still pending.
    static func clinic(_ world: ClientWorld) async throws -> (doctor: DoctorReader, patients: [String]) {
        let doctor = try await world.doctor("doc", on: try world.device("d"))
        _ = try await world.device("d2").accounts.login(username: "doc", password: "doctor-password")
        var names: [String] = []
        for name in ["pat-b", "pat-a", "pat-c"] {
            let (vault, _) = try await world.patient(name, on: try world.device(name))
            try await vault.addActivity(try Sample.activity("walk"))
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            names.append(name)
        }
        try await world.approveAll()
        _ = try await world.device("late").accounts.register(username: "late", password: "late-password", role: .patient)
        _ = try await world.device("later").accounts.register(username: "later", password: "later-password", role: .patient)
        return (doctor, names)
    }

    @Test(arguments: Backend.allCases)
    func everyPageIsReadAndNothingRepeats(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (doctor, patients) = try await Self.clinic(world)
            let admin = try world.adminClient
            let users = try await admin.users(pageSize: 2).users
            #expect(users.map(\.username).sorted() == ["doc", "late", "later"] + patients.sorted())
            #expect(users.map(\.createdAt) == users.map(\.createdAt).sorted(), "oldest first, as before paging")
            let pending = try await admin.pending(pageSize: 1)
            #expect(pending.registrations.map(\.request.username).sorted() == ["late", "later"])
            let listed = try await doctor.patients(pageSize: 1)
            #expect(listed.patients.map(\.username) == patients.sorted() && listed.unverified == 0)
            let sessions = try await world.device("d").accounts.sessions(doctor.account, pageSize: 1)
            #expect(sessions.count == 2 && Set(sessions.map(\.id)).count == 2)
            #expect(sessions.map(\.createdAt) == sessions.map(\.createdAt).sorted(by: >), "newest first")
            // Approving everything reads every page of what waits too.
            #expect(try await admin.approveAll().count == 2)
            #expect(try await admin.pending(pageSize: 1).registrations.isEmpty)
        }
    }

    @Test func aServerWhosePagesDoNotAdvanceIsRefused() async throws {
        try await HostileListingServer.run { world in
            let (doctor, _) = try await Self.clinic(world)
            let admin = try world.adminClient
            let calls: [(String, @Sendable () async throws -> Void)] = [
                ("users", { _ = try await admin.users(pageSize: 2) }),
                ("pending", { _ = try await admin.pending(pageSize: 1) }),
                ("patients", { _ = try await doctor.patients(pageSize: 1) }),
                ("sessions", { _ = try await world.device("d").accounts.sessions(doctor.account, pageSize: 1) }),
            ]
            for (what, call) in calls {
                let error = await #expect(throws: ClientError.self, "\(what)") { try await call() }
                guard case let .integrity(message)? = error else {
                    Issue.record("\(what): expected an integrity failure, got \(String(describing: error))")
                    continue
                }
                #expect(message.contains("do not advance"), "\(what): \(message)")
            }
            // The first page alone is honest: a listing that fits on it still reads.
            #expect(try await admin.users().users.count == 6)
        }
    }

    /// A page without `done` comes from a server from before paging, which sent everything: the last page.
    @Test func aPageWithoutDoneIsTheLast() throws {
        let id = "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0"
        let decoder = JSONDecoder()
        #expect(try decoder.decode(PatientList.self, from: Data(#"{"patients":[]}"#.utf8)).done)
        #expect(try decoder.decode(UserList.self, from: Data(#"{"users":[]}"#.utf8)).done)
        #expect(try decoder.decode(SessionList.self, from: Data(#"{"sessions":[]}"#.utf8)).done)
        let pending = try decoder.decode(PendingResponse.self, from: Data(#"{"registrations":[],"shares":[],"nextSequence":3}"#.utf8))
        #expect(pending.done && pending.nextSequence == 3)
        // Present, it is read as sent.
        let more = try decoder.decode(PatientList.self, from: Data(#"{"patients":[],"nextCursor":"\#(id)","done":false}"#.utf8))
        #expect(!more.done && more.nextCursor == UUID(uuidString: id))
    }
}
