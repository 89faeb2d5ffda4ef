import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny seeded generator, so every property-test case can be
/// replayed from its seed. Shared by this target's property tests.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private func date(_ seconds: Int) -> Date { Date(timeIntervalSince1970: 1_780_000_000 + Double(seconds)) }

/// Random inputs drawn from small domains, so ties (same millisecond, same createdAt, same id) are common.
private enum Gen {
    static let devices = ["device-a", "device-b", "device-c", "phone", "tablet"]

    static func versions(_ rng: inout SplitMix64) -> [Versioned<String>] {
        var stamps = Set<HLCTimestamp>()
        for _ in 0..<Int.random(in: 1...8, using: &rng) {
            stamps.insert(
                HLCTimestamp(
                    physicalMs: UInt64.random(in: 1_000...1_003, using: &rng),
                    counter: UInt32.random(in: 0...2, using: &rng),
                    deviceID: devices.randomElement(using: &rng)!
                )
            )
        }
        var result: [Versioned<String>] = []
        for (i, ts) in stamps.sorted().enumerated() {
            let deleted = Bool.random(using: &rng)
            result.append(deleted ? .tombstone(at: ts) : Versioned(timestamp: ts, payload: "body-\(i)"))
            // Sometimes the opposite kind at the exact same timestamp (the exact-tie case).
            if Int.random(in: 0..<4, using: &rng) == 0 {
                result.append(deleted ? Versioned(timestamp: ts, payload: "twin-\(i)") : .tombstone(at: ts))
            }
            // Sometimes the same version delivered twice.
            if Int.random(in: 0..<5, using: &rng) == 0 { result.append(result.last!) }
        }
        return result
    }

    static func value(_ rng: inout SplitMix64) -> OutcomeValue {
        let id = "v\(Int.random(in: 0..<6, using: &rng))"
        let value: OutcomeValue.Value
        switch Int.random(in: 0..<3, using: &rng) {
        case 0: value = .number(Double(Int.random(in: 0...3, using: &rng)) / 2)
        case 1: value = .text(["ok", "dizzy", "tired"].randomElement(using: &rng)!)
        default: value = .boolean(Bool.random(using: &rng))
        }
        return OutcomeValue(id: id, value: value, units: Bool.random(using: &rng) ? "mg" : nil, createdAt: date(Int.random(in: 0...2, using: &rng)))
    }

    static func outcome(_ rng: inout SplitMix64) -> Outcome {
        let values = (0..<Int.random(in: 0...5, using: &rng)).map { _ in value(&rng) }
        var removed = Set<String>()
        if Int.random(in: 0..<3, using: &rng) == 0 { removed.insert("v\(Int.random(in: 0..<6, using: &rng))") }
        let created = Int.random(in: 0...3, using: &rng)
        return Outcome(
            activityID: "walk",
            occurrence: 3,
            values: values,
            removedValueIDs: removed,
            note: [nil, "felt fine", "skipped", "ok"].randomElement(using: &rng)!,
            createdAt: date(created),
            updatedAt: date(created + Int.random(in: 0...2, using: &rng))
        )
    }
}

/// The expected LWW winner, computed directly from the rule rather than by folding.
private func expectedWinner(_ versions: [Versioned<String>]) -> Versioned<String> {
    let top = versions.map(\.timestamp).max()!
    let atTop = versions.filter { $0.timestamp == top }
    return atTop.first(where: \.deleted) ?? atTop[0]
}

/// Merges a list in a random tree shape, to exercise associativity as well as commutativity.
private func randomTreeMerge(_ items: [Outcome], _ rng: inout SplitMix64) -> Outcome {
    var pool = items
    if pool.count == 1 { return Reconciliation.mergeOutcomes(pool[0], pool[0]) }
    while pool.count > 1 {
        let i = Int.random(in: 0..<pool.count, using: &rng)
        let a = pool.remove(at: i)
        let j = Int.random(in: 0..<pool.count, using: &rng)
        pool[j] = Bool.random(using: &rng) ? Reconciliation.mergeOutcomes(a, pool[j]) : Reconciliation.mergeOutcomes(pool[j], a)
    }
    return pool[0]
}

@Suite("Reconciliation")
struct ReconciliationTests {
    @Test func winnerIsIndependentOfArrivalOrder() {
        for seed in UInt64(0)..<500 {
            var rng = SplitMix64(seed: seed)
            // Given versions of one record from several devices, with ties and duplicates
            let versions = Gen.versions(&rng)
            let expected = expectedWinner(versions)
            // When they arrive in any order
            for _ in 0..<6 {
                let order = versions.shuffled(using: &rng)
                let folded = order.dropFirst().reduce(order[0], Reconciliation.winner)
                // Then the same version wins
                #expect(folded == expected, "seed \(seed)")
            }
        }
    }

    @Test func tombstoneWinsAnExactTieAndOlderVersionsCannotUndoIt() {
        let ts = HLCTimestamp(physicalMs: 5, counter: 0, deviceID: "phone")
        let live = Versioned(timestamp: ts, payload: "walk")
        let dead = Versioned<String>.tombstone(at: ts)
        #expect(Reconciliation.winner(live, dead) == dead)
        #expect(Reconciliation.winner(dead, live) == dead)
        let older = Versioned(timestamp: HLCTimestamp(physicalMs: 4, counter: 9, deviceID: "tablet"), payload: "walk v0")
        #expect(Reconciliation.winner(older, dead) == dead)
        let newer = Versioned(timestamp: HLCTimestamp(physicalMs: 5, counter: 0, deviceID: "tablet"), payload: "re-created")
        #expect(Reconciliation.winner(dead, newer) == newer, "a later write (by device-id tie-break) re-creates")
        #expect(Versioned(timestamp: ts, deleted: true, payload: "ignored").payload == nil)
    }

    @Test func mergeOutcomesIsOrderIndependentAssociativeAndIdempotent() throws {
        for seed in UInt64(0)..<500 {
            var rng = SplitMix64(seed: seed)
            // Given several concurrent copies of one outcome
            let copies = (0..<Int.random(in: 1...6, using: &rng)).map { _ in Gen.outcome(&rng) }
            // (Folding from copies[0] merges it with itself first, which also covers a single copy.)
            let reference = copies.reduce(copies[0], Reconciliation.mergeOutcomes)
            // When they are merged in any order and any grouping, the result is the same
            for _ in 0..<5 {
                let order = copies.shuffled(using: &rng)
                #expect(order.reduce(order[0], Reconciliation.mergeOutcomes) == reference, "seed \(seed) fold")
                #expect(randomTreeMerge(order, &rng) == reference, "seed \(seed) tree")
            }
            // And merging again changes nothing
            #expect(Reconciliation.mergeOutcomes(reference, reference) == reference, "seed \(seed) idempotent")
            for copy in copies { #expect(Reconciliation.mergeOutcomes(reference, copy) == reference, "seed \(seed) absorbs") }
            // And no tombstoned value is present, while every other value id survives
            let removed = copies.reduce(into: Set<String>()) { $0.formUnion($1.removedValueIDs) }
            let ids = Set(copies.flatMap(\.values).map(\.id)).subtracting(removed)
            #expect(reference.removedValueIDs == removed)
            #expect(Set(reference.values.map(\.id)) == ids, "seed \(seed)")
            #expect(reference.values == reference.liveValues, "merged values are live and canonically sorted")
            #expect(reference.createdAt == copies.map(\.createdAt).min())
            #expect(reference.updatedAt == copies.map(\.updatedAt).max())
            // And the encoded form is identical too (the tombstone set is sorted on the wire)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            #expect(try encoder.encode(Reconciliation.mergeOutcomes(copies.last!, reference)) == encoder.encode(reference))
        }
    }

    @Test func tombstonedValuesNeverComeBack() {
        // Given an outcome with two readings, synced to both devices
        let first = OutcomeValue(id: "r1", value: .number(7), units: "mmol/L", createdAt: date(0))
        let second = OutcomeValue(id: "r2", value: .number(6), units: "mmol/L", createdAt: date(1))
        let original = Outcome(activityID: "glucose", occurrence: 0, values: [first, second], createdAt: date(0))
        // When the phone deletes the first reading
        var onPhone = original
        onPhone.removeValue(id: "r1", at: date(10))
        #expect(onPhone.liveValues.map(\.id) == ["r2"])
        // Then merging the tablet's older copy, in either order and repeatedly, does not restore it
        let merged = Reconciliation.mergeOutcomes(original, onPhone)
        #expect(merged.values.map(\.id) == ["r2"])
        #expect(Reconciliation.mergeOutcomes(onPhone, original) == merged)
        #expect(Reconciliation.mergeOutcomes(Reconciliation.mergeOutcomes(merged, original), original) == merged)
        // Even a later-created copy of the deleted value stays deleted
        var edited = original
        edited.values[0].createdAt = date(20)
        edited.updatedAt = date(20)
        #expect(!Reconciliation.mergeOutcomes(merged, edited).values.contains { $0.id == "r1" })
    }

    @Test func concurrentValuesFromTwoDevicesBothSurvive() {
        // Given the same occurrence recorded offline on two devices
        let phone = Outcome(
            activityID: "walk",
            occurrence: 4,
            values: [OutcomeValue(id: "phone-1", value: .boolean(true), createdAt: date(5))],
            note: "morning",
            createdAt: date(5)
        )
        let tablet = Outcome(
            activityID: "walk",
            occurrence: 4,
            values: [OutcomeValue(id: "tablet-1", value: .number(3200), units: "steps", createdAt: date(6))],
            note: "evening",
            createdAt: date(6),
            updatedAt: date(8)
        )
        // When they are merged
        let merged = Reconciliation.mergeOutcomes(phone, tablet)
        // Then both readings are kept, the later note wins, and the dates span both
        #expect(merged.values.map(\.id) == ["phone-1", "tablet-1"])
        #expect(merged.note == "evening")
        #expect(merged.createdAt == date(5) && merged.updatedAt == date(8))
        #expect(Reconciliation.mergeOutcomes(tablet, phone) == merged)
    }

    @Test func conflictingCopiesOfOneValueResolveToTheLaterOne() {
        let early = OutcomeValue(id: "x", value: .number(1), createdAt: date(1))
        let late = OutcomeValue(id: "x", value: .number(2), createdAt: date(2))
        let a = Outcome(activityID: "walk", occurrence: 0, values: [early], createdAt: date(0))
        let b = Outcome(activityID: "walk", occurrence: 0, values: [late], createdAt: date(0))
        #expect(Reconciliation.mergeOutcomes(a, b).values == [late])
        #expect(Reconciliation.mergeOutcomes(b, a).values == [late])
        // Same instant, different content: decided by the canonical bytes, the same either way round
        let zero = OutcomeValue(id: "z", value: .number(0.0), createdAt: date(1))
        let negativeZero = OutcomeValue(id: "z", value: .number(-0.0), createdAt: date(1))
        let c = Outcome(activityID: "walk", occurrence: 0, values: [zero], createdAt: date(0))
        let d = Outcome(activityID: "walk", occurrence: 0, values: [negativeZero], createdAt: date(0))
        let cd = Reconciliation.mergeOutcomes(c, d).values[0]
        let dc = Reconciliation.mergeOutcomes(d, c).values[0]
        #expect(cd.content == dc.content)
    }

    /// Docs/envelope-v1.md §8.3's vector: the content bytes decide, not a JSON spelling, so any
    /// implementation keeps the same copy (a JSON comparison would keep the text).
    @Test func aTieAtOneMillisecondIsDecidedByTheDocumentedContentBytes() throws {
        let at = Date(unixMillis: 1_700_000_000_000)
        let yes = OutcomeValue(id: "x", value: .boolean(true), createdAt: at)
        let text = OutcomeValue(id: "x", value: .text("yes"), createdAt: at)
        let label = "00000015436172655661756c742d76616c75652d69642d7631"
        #expect(Hex.encode(yes.content) == label + "0301" + "0000" + "0000018bcfe56800")
        #expect(Hex.encode(text.content) == label + "0200000003796573" + "0000" + "0000018bcfe56800")
        let a = Outcome(activityID: "walk", occurrence: 0, values: [yes], createdAt: at)
        let b = Outcome(activityID: "walk", occurrence: 0, values: [text], createdAt: at)
        #expect(Reconciliation.mergeOutcomes(a, b).values == [yes])
        #expect(Reconciliation.mergeOutcomes(b, a).values == [yes])
        let doc = try SpecVectors.doc("envelope-v1.md")
        #expect(doc.contains("00000015436172655661756c742d76616c75652d69642d7631 03 01 00 00 0000018bcfe56800"))
        #expect(doc.contains("00000015436172655661756c742d76616c75652d69642d7631 02 00000003796573 00 00 0000018bcfe56800"))
        // A sub-millisecond difference is no difference: the content decides there too.
        let later = OutcomeValue(id: "x", value: .text("yes"), createdAt: Date(timeIntervalSince1970: 1_700_000_000.0004))
        let c = Outcome(activityID: "walk", occurrence: 0, values: [later], createdAt: at)
        #expect(Reconciliation.mergeOutcomes(a, c).values == [yes] && Reconciliation.mergeOutcomes(c, a).values == [yes])
    }
}

/// The decision a device takes for one pulled version, case by case (Docs/design.md §5).
@Suite("Resolution of a pulled version")
struct ResolutionTests {
    private static func ts(_ ms: UInt64, _ device: String = "a") -> HLCTimestamp { HLCTimestamp(physicalMs: ms, counter: 0, deviceID: device) }
    private static let day = Date(timeIntervalSince1970: 1_780_000_000)
    private static func outcome(_ values: [String], removed: Set<String> = []) -> Outcome {
        Outcome(
            activityID: "walk",
            occurrence: 3,
            values: values.map { OutcomeValue(id: $0, value: .boolean(true), units: nil, createdAt: day) },
            removedValueIDs: removed,
            note: nil,
            createdAt: day,
            updatedAt: day
        )
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var local: LocalCopy?
        var remote: Versioned<Outcome>
        var expected: Resolution
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "nothing local: adopt",
            local: nil,
            remote: Versioned(timestamp: ts(5), deleted: false, payload: nil),
            expected: .adoptRemote(dropOutbox: false)
        ),
        Case(
            name: "same version: keep",
            local: LocalCopy(timestamp: ts(5), deleted: false, pending: false),
            remote: Versioned(timestamp: ts(5), deleted: false, payload: nil),
            expected: .keepLocal
        ),
        Case(
            name: "newer remote activity beats a sent copy",
            local: LocalCopy(timestamp: ts(4), deleted: false, pending: false),
            remote: Versioned(timestamp: ts(5), deleted: false, payload: nil),
            expected: .adoptRemote(dropOutbox: false)
        ),
        Case(
            name: "newer remote beats an unsent copy, which leaves the outbox",
            local: LocalCopy(timestamp: ts(4), deleted: false, pending: true),
            remote: Versioned(timestamp: ts(5), deleted: false, payload: nil),
            expected: .adoptRemote(dropOutbox: true)
        ),
        Case(
            name: "older remote loses",
            local: LocalCopy(timestamp: ts(6), deleted: false, pending: true),
            remote: Versioned(timestamp: ts(5), deleted: false, payload: nil),
            expected: .keepLocal
        ),
        Case(
            name: "same millisecond: the greater device wins",
            local: LocalCopy(timestamp: ts(5, "b"), deleted: false, pending: true),
            remote: Versioned(timestamp: ts(5, "a"), deleted: false, payload: nil),
            expected: .keepLocal
        ),
        Case(
            name: "a newer tombstone deletes",
            local: LocalCopy(timestamp: ts(4), deleted: false, pending: false, outcome: outcome(["x"])),
            remote: .tombstone(at: ts(5)),
            expected: .adoptRemote(dropOutbox: false)
        ),
        Case(
            name: "an older live copy cannot undelete",
            local: LocalCopy(timestamp: ts(6), deleted: true, pending: false),
            remote: Versioned(timestamp: ts(5), payload: outcome(["x"])),
            expected: .keepLocal
        ),
        Case(
            name: "newer remote outcome holding everything: adopt",
            local: LocalCopy(
                timestamp: ts(4),
                deleted: false,
                pending: true,
                outcome: outcome(["x"])
            ),
            remote: Versioned(timestamp: ts(5), payload: outcome(["x", "y"])),
            expected: .adoptRemote(dropOutbox: true)
        ),
        Case(
            name: "newer local outcome holding everything: keep",
            local: LocalCopy(
                timestamp: ts(6),
                deleted: false,
                pending: false,
                outcome: outcome(["x", "y"])
            ),
            remote: Versioned(timestamp: ts(5), payload: outcome(["y"])),
            expected: .keepLocal
        ),
        Case(
            name: "each side has a reading the other lacks: merge",
            local: LocalCopy(
                timestamp: ts(6),
                deleted: false,
                pending: true,
                outcome: outcome(["x"])
            ),
            remote: Versioned(timestamp: ts(5), payload: outcome(["y"])),
            expected: .writeMerged(outcome(["x", "y"]))
        ),
        Case(
            name: "a newer remote that lost a local reading still merges",
            local: LocalCopy(
                timestamp: ts(4),
                deleted: false,
                pending: false,
                outcome: outcome(["x", "y"])
            ),
            remote: Versioned(timestamp: ts(5), payload: outcome(["y"])),
            expected: .writeMerged(outcome(["x", "y"]))
        ),
        Case(
            name: "a removal on the remote side wins over the local reading",
            local: LocalCopy(
                timestamp: ts(4),
                deleted: false,
                pending: false,
                outcome: outcome(["x"])
            ),
            remote: Versioned(timestamp: ts(5), payload: outcome([], removed: ["x"])),
            expected: .adoptRemote(dropOutbox: false)
        ),
    ]

    @Test(arguments: cases)
    func resolves(_ c: Case) {
        #expect(Reconciliation.resolve(local: c.local, remote: c.remote) == c.expected)
    }
}
