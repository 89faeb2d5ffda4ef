import Foundation
import HTTPTypes
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// The listings that grow with the clinic are paged by id (Docs/design.md §6.1): a page after a
/// cursor, `limit` items at most, a next cursor and whether it was the last page.
@Suite("API: listings page by id")
struct ListingPageAPITests {
    /// Every page of `path` from the first, `limit` a page, and the ids each page's cursor named.
    static func pages<Page: Decodable>(
        _ api: APIClient,
        _ path: String,
        limit: Int,
        _ type: Page.Type,
        token: String? = nil,
        next: (Page) -> String?,
        done: (Page) -> Bool
    ) async throws -> [Page] {
        var out: [Page] = []
        var cursor: String?
        for _ in 0..<100 {
            let query = (cursor.map { "after=\($0)&" } ?? "") + "limit=\(limit)"
            let r = try await send(api, .get, path + "?" + query, token: token)
            try #require(r.status == .ok, "\(path)?\(query): \(r.status)")
            let page = try api.decode(Page.self, r)
            out.append(page)
            if done(page) { return out }
            #expect(next(page) != cursor, "a page that is not the last moves the cursor")
            cursor = next(page)
        }
        Issue.record("\(path) never said done")
        return out
    }

    /// A GET as the admin (signed) or as a session.
    static func send(_ api: APIClient, _ method: HTTPRequest.Method, _ path: String, token: String?) async throws -> TestResponse {
        if let token { return try await api.send(method, path, token: token) }
        return try await api.adminSend(method, path).0
    }

    static func ids(_ users: [UUID]) -> [String] { users.map { $0.uuidString.lowercased() } }

    @Test(arguments: Backend.allCases)
    func adminUsersAndPendingRegistrationsPageByID(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            var registered: [UUID] = []
            for i in 0..<7 { registered.append(try await api.register("user\(i)", role: .patient).0.userID) }
            let users = try await Self.pages(api, Routes.adminUsers, limit: 3, UserList.self, next: { $0.nextCursor?.uuidString }, done: \.done)
            #expect(users.map(\.users.count) == [3, 3, 1])
            #expect(users.map(\.done) == [false, false, true])
            let listed = users.flatMap(\.users).map(\.userID)
            #expect(Self.ids(listed) == Self.ids(registered).sorted(), "every user once, by id")
            #expect(users.last?.nextCursor == listed.last)

            let pending = try await Self.pages(
                api,
                Routes.adminPending,
                limit: 3,
                PendingResponse.self,
                next: { $0.nextCursor?.uuidString },
                done: \.done
            )
            #expect(pending.map(\.registrations.count) == [3, 3, 1])
            #expect(Self.ids(pending.flatMap(\.registrations).map(\.request.userID)) == Self.ids(registered).sorted())

            // Without a cursor or a limit: the first page of the default size, here all of them.
            let (plain, _) = try await api.adminSend(.get, Routes.adminUsers)
            let first = try api.decode(UserList.self, plain)
            #expect(first.users.count == 7 && first.done)
            // A page past the last id is empty, done, and keeps the cursor sent.
            let last = try #require(listed.last)
            let (beyond, _) = try await api.adminSend(.get, Routes.adminUsers + "?after=\(last.uuidString)")
            let empty = try api.decode(UserList.self, beyond)
            #expect(empty.users.isEmpty && empty.done && empty.nextCursor == last)
            let (one, _) = try await api.adminSend(.get, Routes.adminUsers + "?limit=0")
            #expect(try api.decode(UserList.self, one).users.count == 1, "a limit below 1 reads 1")
            #expect(VaultService.listLimit(1_000_000) == APILimits.maxListLimit && VaultService.listLimit(-5) == 1)
            let (huge, _) = try await api.adminSend(.get, Routes.adminUsers + "?limit=\(Int64.max)")
            #expect(huge.status == .ok)
            #expect(try api.decode(UserList.self, huge).users.count == 7, "a huge limit is clamped")
            for bad in ["?after=nope", "?limit=-1", "?limit=ten", "?sharesAfter=1"] {
                let path = (bad.contains("shares") ? Routes.adminPending : Routes.adminUsers) + bad
                let (r, _) = try await api.adminSend(.get, path)
                #expect(r.status == .badRequest && api.errorCode(r) == .badRequest, "\(path)")
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func pendingSharesAndTheDoctorsPatientsPageByID(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let doctor = try await api.user("doc", role: .doctor)
            var patients: [UUID] = []
            var shares: [ShareInfo] = []
            var tresors: [(TestUser, Tresor)] = []
            for i in 0..<5 {
                let patient = try await api.user("pat\(i)", role: .patient)
                for category in ["interventions", "assessments"] {
                    let tresor = Tresor.create(ownerID: patient.id, category: category)
                    #expect(try await api.declareTresor(patient, tresor).status == .ok)
                    shares.append(try await api.requestShare(patient, doctor, tresor))
                    tresors.append((patient, tresor))
                }
                patients.append(patient.id)
            }
            // Ten pending shares, three a page: both lists advance side by side until both are done.
            var pages: [PendingResponse] = []
            var (after, sharesAfter): (UUID?, UUID?) = (nil, nil)
            while true {
                var query = "limit=3"
                if let after { query += "&after=\(after.uuidString)" }
                if let sharesAfter { query += "&sharesAfter=\(sharesAfter.uuidString)" }
                let page = try api.decode(PendingResponse.self, try await api.adminSend(.get, Routes.adminPending + "?" + query).0)
                pages.append(page)
                if page.done || pages.count > 10 { break }
                (after, sharesAfter) = (page.nextCursor, page.nextShareCursor)
            }
            #expect(pages.map(\.shares.count) == [3, 3, 3, 1])
            #expect(pages.allSatisfy { $0.registrations.isEmpty }, "every user is approved")
            #expect(Self.ids(pages.flatMap(\.shares).map(\.share.shareID)) == Self.ids(shares.map(\.shareID)).sorted())

            for share in shares { #expect(try await api.approveShare(share).status == .ok) }
            let listed = try await Self.pages(
                api,
                Routes.doctorPatients,
                limit: 2,
                PatientList.self,
                token: doctor.token,
                next: { $0.nextCursor?.uuidString },
                done: \.done
            )
            #expect(listed.map(\.patients.count) == [2, 2, 1])
            let summaries = listed.flatMap(\.patients)
            #expect(Self.ids(summaries.map(\.patientID)) == Self.ids(patients).sorted(), "each patient once, by id")
            #expect(summaries.allSatisfy { $0.categories == ["assessments", "interventions"] }, "a patient's shares stay on one page")
            let bad = try await api.send(.get, Routes.doctorPatients + "?after=xyz", token: doctor.token)
            #expect(bad.status == .badRequest)
        }
    }

    @Test(arguments: Backend.allCases)
    func sessionsPageByID(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let user = try await api.user("pat", role: .patient)
            for _ in 0..<4 { #expect(try await api.login("pat", password: user.password).status == .ok) }
            let pages = try await Self.pages(api, Routes.sessions, limit: 2, SessionList.self, token: user.token, next: \.nextCursor, done: \.done)
            #expect(pages.map(\.sessions.count) == [2, 2, 1])
            let ids = pages.flatMap(\.sessions).map(\.id)
            #expect(ids == ids.sorted() && Set(ids).count == 5, "five sessions, by id, none twice")
            #expect(pages.flatMap(\.sessions).filter(\.current).count == 1)
            for bad in ["?after=XYZ", "?after=0123456789ABCDEF", "?limit=x"] {
                #expect(try await api.send(.get, Routes.sessions + bad, token: user.token).status == .badRequest, "\(bad)")
            }
        }
    }
}
