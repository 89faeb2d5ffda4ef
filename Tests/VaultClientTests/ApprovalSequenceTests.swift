import Foundation
import Testing
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto
import VaultTestSupport

/// A crafted next approval sequence at the edge of its type: the admin's SDK signs nothing outside what
/// the server stores and never traps counting past it.
@Suite("Client: approval sequences at their limit")
struct ApprovalSequenceTests {
    @Test(arguments: Backend.allCases)
    func anOfferedSequencePastTheLimitIsRefusedBeforeSigningAndNothingTraps(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            for name in ["pat", "quinn", "rosa"] {
                _ = try await world.device(name).accounts.register(username: name, password: "a-long-password", role: .patient)
            }
            let admin = try world.adminClient
            var pending = try await admin.pending()
            #expect(pending.registrations.count == 3)
            // What a hostile server (or one whose database was edited) offers: the last numbers of UInt64.
            pending.nextSequence = UInt64.max - 1
            let results = await admin.approveEach(of: pending)
            #expect(results.count == 3)
            for result in results {
                let message = "\(result.error.map { "\($0)" } ?? "approved")"
                #expect(message.contains("outside 1...\(APILimits.maxApprovalSequence)"), "\(message)")
            }
            #expect(try await admin.pending().registrations.count == 3, "nothing was approved")
            // The highest storable number is used; the one after it is refused, not wrapped.
            pending.nextSequence = APILimits.maxApprovalSequence
            let last = await admin.approveEach(of: pending)
            #expect(last.map { $0.error == nil } == [true, false, false])
            #expect(AdminClient.sequence(after: .max) == .max)
        }
    }
}
