import Foundation
import Testing
import VaultTestSupport

/// One crafted number in the server's database (an approval sequence at the edge of 64 bits): the admin
/// tool and the server answer in words and go on working (Docs/design.md §2, "Approval").
@Suite("End to end: an approval sequence edited to the edge of its type", .serialized)
struct ApprovalSequenceCLITests {
    @Test(arguments: FaultBackend.allCases)
    func theAdminToolAndTheServerRefuseInWordsAndKeepWorking(backend: FaultBackend) async throws {
        try await FaultWorld.run(backend) { world in
            func admin(_ args: [String]) async throws -> Tools.Result {
                try await world.tools.run("carevault-admin", args, extra: world.common)
            }
            // alice's approval (sequence 1) raised to 2^64 - 2 underneath the server.
            try await ServerOperator.of(world.server.database).editUserApprovals(
                replacing: #""sequence":1,"#,
                with: #""sequence":18446744073709551614,"#
            )
            #expect(try await world.patient(["register", "--username", "carol"], home: "carol").status == 0)
            let approve = try await admin(["approve", "--all"])
            #expect(approve.status != 0 && approve.status != SIGILL && approve.status != SIGTRAP, "exit \(approve.status)")
            #expect(approve.stderr.contains("no further approval can be numbered"), "\(approve.stderr)")
            // Nothing was signed past the limit, and the server still answers the admin and everyone.
            let users = try await admin(["users"])
            #expect(users.status == 0, "\(users.stderr)")
            #expect(try await world.patient(["sync"]).status == 0)
        }
    }
}
