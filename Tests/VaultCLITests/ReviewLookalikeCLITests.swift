import Foundation
import Testing

/// The admin's review names a certified look-alike of a new name (Docs/design.md §2, "Look-alike names").
@Suite("End to end: look-alike names in the admin's review", .serialized)
struct ReviewLookalikeCLITests {
    @Test func aNewNameLikeACertifiedOneIsFlaggedInTheReview() async throws {
        try await FaultWorld.run(.sqlite) { world in
            // "alice" was certified when the world was made; "a1ice" registers now.
            #expect(try await world.patient(["register", "--username", "a1ice"], home: "mallory").status == 0)
            let review = try await world.tools.run("carevault-admin", ["review"], extra: world.common)
            #expect(review.stderr.contains("a1ice"), "\(review.stderr)")
            #expect(
                review.stderr.contains("WARNING: first certificate for this name and id, but 'a1ice' looks like the certified 'alice'"),
                "\(review.stderr)"
            )
            #expect(review.stdout.contains("skipped"), "without a terminal nothing is approved: \(review.stdout)")
        }
    }
}
