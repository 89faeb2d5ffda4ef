import ClinicAudit
import Foundation
import Testing

/// The clinic simulation's final audit must report what it exists to find: an acknowledged push the
/// database dropped, a row stored twice, a record nobody pushed, and a doctor's view that differs.
@Suite("Clinic audit")
struct ClinicAuditTests {
    let alice = UUID()
    let bob = UUID()

    func acked(_ owner: UUID, _ ids: [String]) -> [ClinicAudit.Acknowledged] { ids.map { .init(owner: owner, recordID: $0) } }
    func stored(_ owner: UUID, _ ids: [String]) -> [ClinicAudit.Stored] { ids.map { .init(owner: owner, recordID: $0, heads: 1, versions: 1) } }

    @Test("the head and version counts are joined by owner and record; what one side lacks shows as 0")
    func countsJoined() {
        let c = { (o: UUID, r: String, n: Int) in ClinicAudit.Counted(owner: o, recordID: r, n: n) }
        let s = ClinicAudit.stored(
            heads: [c(alice, "a1", 1), c(alice, "h", 1), c(bob, "a1", 2)],
            versions: [c(alice, "a1", 3), c(alice, "v", 1), c(bob, "a1", 1)]
        )
        #expect(
            Set(s) == [
                .init(owner: alice, recordID: "a1", heads: 1, versions: 3), .init(owner: alice, recordID: "h", heads: 1, versions: 0),
                .init(owner: alice, recordID: "v", heads: 0, versions: 1), .init(owner: bob, recordID: "a1", heads: 2, versions: 1),
            ]
        )
        let r = ClinicAudit.compare(acknowledged: acked(alice, ["a1", "h", "v"]) + acked(bob, ["a1"]), stored: s)
        #expect(!r.clean)
    }

    @Test("every acknowledged record stored once: clean")
    func clean() {
        let r = ClinicAudit.compare(
            acknowledged: acked(alice, ["a1", "a2"]) + acked(bob, ["b1"]),
            stored: stored(alice, ["a1", "a2"]) + stored(bob, ["b1"])
        )
        #expect(r.clean)
        #expect(r == ClinicAudit.Result())
    }

    @Test("a dropped row is reported as lost, naming it")
    func dropped() {
        let r = ClinicAudit.compare(acknowledged: acked(alice, ["a1", "a2", "a3"]), stored: stored(alice, ["a1", "a3"]))
        #expect(r.lost == 1)
        #expect(r.duplicated == 0 && r.unexpected == 0)
        #expect(r.examples.contains { $0.hasPrefix("lost") && $0.hasSuffix("/a2") })
    }

    @Test("the same record id under another owner does not stand in for a lost one")
    func swappedOwner() {
        let r = ClinicAudit.compare(acknowledged: acked(alice, ["x"]), stored: stored(bob, ["x"]))
        #expect(r.lost == 1)
        #expect(r.unexpected == 1)
    }

    @Test("a duplicated version or head row is reported")
    func duplicated() {
        var rows = stored(alice, ["a1", "a2"])
        rows[0].versions = 2  // the same record pushed once, stored as two versions
        rows[1].heads = 2  // a head row copied underneath
        let r = ClinicAudit.compare(acknowledged: acked(alice, ["a1", "a2"]), stored: rows)
        #expect(r.duplicated == 2)
        #expect(r.lost == 0)
        // A record the device itself pushed in two versions is not a duplicate.
        let two = ClinicAudit.compare(acknowledged: [.init(owner: alice, recordID: "a1", versions: 2)], stored: [rows[0]])
        #expect(two.clean)
    }

    @Test("a head whose versions are gone is a lost record")
    func headWithoutVersions() {
        var rows = stored(alice, ["a1", "a2"])
        rows[1].versions = 0
        let r = ClinicAudit.compare(acknowledged: acked(alice, ["a1", "a2"]), stored: rows)
        #expect(r.lost == 1)
        #expect(r.examples.contains { $0.hasPrefix("lost") && $0.contains("/a2") })
        // Fewer versions than the device pushed: lost too.
        let fewer = ClinicAudit.compare(acknowledged: [.init(owner: alice, recordID: "a1", versions: 3)], stored: [rows[0]])
        #expect(fewer.lost == 1)
    }

    @Test("a row listed twice by the reader adds up (a copied row is counted, not hidden)")
    func listedTwice() {
        let r = ClinicAudit.compare(acknowledged: acked(alice, ["a1"]), stored: stored(alice, ["a1", "a1"]))
        #expect(r.duplicated == 2)
    }

    @Test("a record nobody pushed is unexpected; other owners are ignored when the clinic is named")
    func unexpected() {
        let rows = stored(alice, ["a1", "zz"]) + stored(bob, ["b9"])
        let r = ClinicAudit.compare(acknowledged: acked(alice, ["a1"]), stored: rows, owners: [alice])
        #expect(r.unexpected == 1)
        #expect(r.examples == ["unexpected \(alice.uuidString.lowercased())/zz (1 heads, 1 versions)"])
    }

    @Test("a doctor's view: missing, extra and stale records are told apart")
    func views() {
        typealias I = ClinicViewAudit.Item
        let patient = [
            I(activityID: "walk", occurrence: nil, values: []), I(activityID: "walk", occurrence: 1, values: ["7 steps"]),
            I(activityID: "walk", occurrence: 2, values: ["5 steps", "9 steps"]),
        ]
        #expect(ClinicViewAudit.compare(patient: patient, doctor: patient.reversed()).matches)
        // The doctor holds an older state of occurrence 2 and lacks nothing else.
        let stale = [patient[0], patient[1], I(activityID: "walk", occurrence: 2, values: ["9 steps"])]
        let d = ClinicViewAudit.compare(patient: patient, doctor: stale)
        #expect(d.missing == [patient[2]])
        #expect(d.extra == [I(activityID: "walk", occurrence: 2, values: ["9 steps"])])
        // A value changed, its count the same: told apart, and the order values are listed in does not matter.
        let changed = [patient[0], patient[1], I(activityID: "walk", occurrence: 2, values: ["9 steps", "6 steps"])]
        #expect(!ClinicViewAudit.compare(patient: patient, doctor: changed).matches)
        #expect(
            ClinicViewAudit.compare(
                patient: patient,
                doctor: [patient[0], patient[1], I(activityID: "walk", occurrence: 2, values: ["9 steps", "5 steps"])]
            ).matches
        )
        // A record of a category that was not shared shows as extra.
        let leaked = patient + [I(activityID: "mood", occurrence: 1, values: ["3"])]
        #expect(ClinicViewAudit.compare(patient: patient, doctor: leaked).extra.map(\.activityID) == ["mood"])
        #expect(ClinicViewAudit.compare(patient: patient, doctor: Array(patient.dropLast())).missing.count == 1)
    }
}
