import Foundation
import Testing

/// What a new user reads when trying the demo: a sync after an approval says it delivered the keys, and
/// the access log names doctors by username, not by id.
@Suite("End to end: the demo as a new user reads it", .serialized)
struct DemoStoryCLITests {
    @Test func syncAfterAnApprovalSaysItDeliveredTheKeysAndTheLogNamesTheDoctor() async throws {
        try await FaultWorld.run(.sqlite) { world in
            try await world.addDoctor("drbob", home: "bob")
            let add = try await world.patient([
                "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
            ])
            #expect(add.status == 0, "\(add.stderr)")
            #expect(try await world.patient(["share", "grant", "--doctor", "drbob", "--category", "interventions"]).status == 0)
            #expect(try await world.admin(["approve", "--all"]).status == 0)

            let sync = try await world.patient(["sync"])
            #expect(sync.status == 0, "\(sync.stderr)")
            #expect(sync.stdout.contains("delivered the keys of interventions to drbob"), "\(sync.stdout)")
            // Said once: the next sync has nothing to deliver.
            let again = try await world.patient(["sync", "--json"])
            #expect(again.status == 0, "\(again.stderr)")
            let summary = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
            #expect((summary["keysDelivered"] as? [String])?.isEmpty == true, "\(again.stdout)")
            #expect(try await world.doctor(["show", "alice"]).status == 0)

            let log = try await world.patient(["access-log"])
            #expect(log.status == 0, "\(log.stderr)")
            let approved = log.stdout.split(separator: "\n").filter { $0.contains("share.approved") }
            #expect(approved.count == 1, "\(log.stdout)")
            #expect(approved.allSatisfy { $0.contains("doctor=drbob") }, "\(log.stdout)")
            #expect(log.stdout.range(of: "doctor=[0-9a-f]{8}-", options: .regularExpression) == nil, "a doctor shown by id:\n\(log.stdout)")
        }
    }
}
