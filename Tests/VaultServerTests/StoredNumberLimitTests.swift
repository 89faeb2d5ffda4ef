import Foundation
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// Numbers the database hands back may have been edited to the edge of their type: each is refused with
/// a clear error and the server goes on answering (Docs/design.md §3, "Approval").
@Suite struct StoredNumberLimitTests {
    static let limit = APILimits.maxApprovalSequence

    func certificate(_ api: APIClient, _ reg: RegistrationRequest) throws -> Certificate {
        try Certificate.issue(
            userID: reg.userID,
            username: reg.username,
            role: reg.role,
            signingKey: reg.signingKey,
            boxKey: reg.boxKey,
            issuedAt: 1,
            adminKey: api.admin
        )
    }

    @Test(arguments: Backend.allCases)
    func anApprovalSequenceAboveWhatTheSchemaStoresIsRefused(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (_, reg, _) = try await api.register("dora", role: .patient)
            let cert = try certificate(api, reg)
            for sequence in [UInt64.max - 1, UInt64.max, Self.limit + 1] {
                let r = try await api.approveRegistration(reg.userID, cert, sequence: sequence)
                #expect(r.status == .badRequest && api.errorCode(r) == .invalidApproval, "sequence \(sequence)")
            }
            #expect(try await api.repository.user(id: reg.userID)?.status == .pending)
            // The highest storable number is taken; after it no number is offered, in words, not a trap.
            #expect(try await api.approveRegistration(reg.userID, cert, sequence: Self.limit).status == .ok)
            let (pending, _) = try await api.adminSend(.get, Routes.adminPending)
            #expect(pending.status == .conflict)
            #expect(String(decoding: pending.body.readableBytesView, as: UTF8.self).contains("no further approval can be numbered"))
            #expect(try await api.adminSend(.get, Routes.adminUsers).0.status == .ok, "the server still answers")
        }
    }

    @Test(arguments: Backend.allCases)
    func aStoredApprovalSequenceEditedToTheMaximumDoesNotTrapTheServer(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (_, reg, _) = try await api.register("erin", role: .patient)
            #expect(try await api.approve(reg).1.status == .ok)
            for edited in [UInt64.max - 1, UInt64.max, Self.limit] {
                var approval = try #require(try await api.repository.user(id: reg.userID)?.approval)
                approval.sequence = edited
                try await api.repository.databaseOperator.setUserApprovals(approval)
                #expect(try await api.repository.maxApprovalSequence() == edited)
                let (pending, _) = try await api.adminSend(.get, Routes.adminPending)
                #expect(pending.status == .conflict, "highest stored \(edited): no next number is offered")
            }
            _ = try await api.register("fred", role: .doctor)
            #expect(try await api.adminSend(.get, Routes.adminUsers).0.status == .ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func editedAuditAndChangeSequencesFailTheRequestNotTheProcess(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("gina", role: .patient)
            let tresor = Tresor.create(ownerID: patient.id, category: "interventions")
            #expect(try await api.declareTresor(patient, tresor).status == .ok)
            #expect(try await api.push(patient, [try api.envelope(patient, tresor, record: "rest", payload: "{}")]).0.status == .ok)
            try await api.repository.databaseOperator.setChangeSequences(to: .max)
            let (push, _) = try await api.push(patient, [try api.envelope(patient, tresor, record: "walk", payload: "{}")])
            #expect(push.status == .internalServerError, "the change sequence cannot go past its column")
            try await api.repository.databaseOperator.setChangeSequences(to: -5)
            #expect(try await api.push(patient, [try api.envelope(patient, tresor, record: "walk", payload: "{}")]).0.status == .internalServerError)
            // The audit head at the end of its column: an audited action fails, the process lives.
            try await api.repository.databaseOperator.setAuditHead(sequence: .max)
            #expect(try await api.register("hugo", role: .patient).2.status == .internalServerError)
            try await api.repository.databaseOperator.setAuditHead(sequence: -1)
            #expect(try await api.register("ivan", role: .patient).2.status == .internalServerError)
            #expect(try await api.send(.get, Routes.health).status == .ok)
        }
    }

    @Test(arguments: Backend.allCases)
    func editedLoginThrottleRowsAtTheEdgesDoNotTrapTheServer(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            _ = try await api.user("kira", role: .patient)
            #expect(try await api.wrongLogin("kira").status == .unauthorized)
            // Every throttle row at one edge, then the other: each login is answered, in words.
            for edge in [Int64.max, Int64.min] {
                try await api.repository.databaseOperator.setLoginThrottle(to: edge)
                let login = try await api.login("kira", password: "correct horse")
                #expect([.ok, .tooManyRequests].contains(login.status), "edge \(edge): \(login.status)")
                #expect([.unauthorized, .tooManyRequests].contains(try await api.wrongLogin("kira").status))
            }
            // SQLite keeps whatever type is written: text where a number is kept fails the request, not the
            // process (GRDB's row subscripts would stop it).
            if backend == .sqlite {
                try await api.repository.attackerExecutes("UPDATE login_throttle SET failures = 'many'")
                #expect(try await api.login("kira", password: "correct horse").status == .internalServerError)
                try await api.repository.attackerExecutes("DELETE FROM login_throttle")
                try await api.repository.attackerExecutes("UPDATE users SET credential_generation = 'next'")
                // Refused somewhere on the way (the parameters or the login answer 500), never a session.
                let login = try? await api.login("kira", password: "correct horse")
                #expect(login?.status != .ok)
            }
            #expect(try await api.send(.get, Routes.health).status == .ok)
        }
    }
}
