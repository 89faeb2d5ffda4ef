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

/// The checkpoint routes (Docs/design.md §6): the admin's behind the admin signature, the patient's behind
/// a patient session, and the chain of hashes without any entry's contents.
@Suite("API: audit checkpoints and the chain of hashes")
struct AuditCheckpointAPITests {
    @Test(arguments: Backend.allCases)
    func routesKeepTheirAccessRulesAndTheChainCarriesNoContents(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let patient = try await api.user("pat", role: .patient)
            let doctor = try await api.user("doc", role: .doctor)
            for path in [Routes.accessLogChain, Routes.accessLogCheckpoints] {
                #expect(try await api.send(.get, path).status == .unauthorized, "\(path) without a session")
                #expect(try await api.send(.get, path, token: doctor.token).status == .forbidden, "\(path) for a doctor")
            }
            for method in [HTTPRequest.Method.get, .post] {
                let unsigned = try await api.send(method, Routes.adminAuditCheckpoints, token: patient.token)
                #expect(unsigned.status == .unauthorized, "\(method) with a session instead of the admin signature")
                let (foreign, _) = try await api.adminSend(method, Routes.adminAuditCheckpoints, key: .generate())
                #expect(foreign.status == .unauthorized && api.errorCode(foreign) == .invalidSignature)
            }

            let entries = try await api.repository.auditEntries(after: 0, limit: 1_000, patientID: nil)
            let page = try await api.send(.get, Routes.accessLogChain + "?after=1&limit=2", token: patient.token)
            let links = try api.decode(AuditLinkPage.self, page)
            #expect(
                links.links
                    == entries.dropFirst().prefix(2).map {
                        AuditLink(
                            sequence: $0.sequence,
                            previousHash: $0.previousHash,
                            hash: $0.hash,
                            format: $0.format,
                            digest: AuditChain.digest(of: $0),
                            patientLink: $0.patientLink
                        )
                    }
            )
            #expect(links.nextCursor == 3 && !links.done)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(page.body.readableBytesView)) as? [String: Any])
            let first = try #require((object["links"] as? [[String: Any]])?.first)
            // Format 2 (Docs/envelope-v1.md §3.1): a digest and the per-patient link, never the contents.
            #expect(Set(first.keys).isSubset(of: ["sequence", "previousHash", "hash", "format", "digest", "patientLink"]))
            #expect(first["actor"] == nil && first["action"] == nil && first["details"] == nil && first["patientID"] == nil)

            let head = try #require(entries.last)
            let checkpoint = AuditCheckpoint.sign(sequence: head.sequence, headHash: head.hash, signedAt: 5, adminKey: api.admin)
            let (stored, _) = try await api.adminSend(.post, Routes.adminAuditCheckpoints, json: checkpoint)
            #expect(stored.status == .ok)
            #expect(try api.decode(AuditCheckpoint.self, stored) == checkpoint)
            let listed = try await api.send(.get, Routes.accessLogCheckpoints, token: patient.token)
            #expect(try api.decode(AuditCheckpointList.self, listed).checkpoints == [checkpoint])
            let (adminList, _) = try await api.adminSend(.get, Routes.adminAuditCheckpoints)
            #expect(try api.decode(AuditCheckpointList.self, adminList).checkpoints == [checkpoint])

            var bent = checkpoint
            bent.headHash = "zz"
            let (malformed, _) = try await api.adminSend(.post, Routes.adminAuditCheckpoints, json: bent)
            #expect(malformed.status == .badRequest && api.errorCode(malformed) == .invalidApproval)
            let forged = AuditCheckpoint.sign(sequence: 1, headHash: entries[0].hash, signedAt: 5, adminKey: .generate())
            let (refused, _) = try await api.adminSend(.post, Routes.adminAuditCheckpoints, json: forged)
            #expect(refused.status == .badRequest && api.errorCode(refused) == .invalidApproval)
            let wrong = AuditCheckpoint.sign(sequence: 1, headHash: head.hash, signedAt: 5, adminKey: api.admin)
            let (conflict, _) = try await api.adminSend(.post, Routes.adminAuditCheckpoints, json: wrong)
            #expect(conflict.status == .conflict)
            #expect(try await api.repository.auditCheckpoints() == [checkpoint])
        }
    }
}
