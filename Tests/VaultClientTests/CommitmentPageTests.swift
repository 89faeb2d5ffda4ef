import Foundation
import NIOConcurrencyHelpers
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient

/// Pages authenticated by the state commitment (Docs/commitment-pages.md): a final page whose records are
/// the heads the patient committed to goes without one signature check per record; anything else (a
/// swapped, tampered, replayed or dropped envelope, a commitment missing, refused or not matching) falls
/// back to checking each record, and both paths accept and refuse exactly the same pages.
@Suite("Client: pages authenticated by the state commitment")
struct CommitmentPageTests {
    /// A patient with walk, run and swim in interventions (run edited once, its first version kept) and
    /// mood in assessments, all pushed with commitments; a doctor granted interventions; and the honest
    /// final page of that share, with the commitment it carried before the edit.
    struct Fixture: Sendable {
        var world: ClientWorld
        var vault: PatientVault
        var password: String
        var doctor: DoctorReader
        var patient: Certificate
        var share: VerifiedShare
        var honest: [PulledChange]
        var commitments: [StateCommitment]
        var staleCommitments: [StateCommitment]
        var oldRun: Envelope
        var mood: Envelope

        var run: Envelope { honest.compactMap(\.envelope).first { $0.header.recordID == oldRun.header.recordID }! }
        var last: UInt64 { honest.last!.sequence }
    }

    static func fixture(_ world: ClientWorld) async throws -> Fixture {
        let doctor = try await world.doctor("doc", on: try world.device("d"))
        let (vault, password) = try await world.patient("pat", on: try world.device("pat-a"))
        for id in ["walk", "run", "swim"] { try await vault.addActivity(try Sample.activity(id)) }
        try await vault.addActivity(try Sample.activity("mood", category: "assessments"))
        _ = try await vault.sync()
        _ = try await vault.grant(doctor: "doc", category: "interventions")
        try await world.approveAll()
        _ = try await vault.sync()
        let oldRun = try await QuarantineTests.envelope(vault, "run")
        let mood = try await QuarantineTests.envelope(vault, "mood")
        let (patient, shares) = try await doctor.verifiedShares(patient: "pat")
        let share = try #require(shares.first)
        let stale = try await pullShare(doctor, patient, share).commitments
        try await vault.updateActivity(try Sample.activity("run", title: "Run"))
        _ = try await vault.sync()
        let (page, commitments) = try await pullShare(doctor, patient, share)
        #expect(page.done && page.changes.count == 3 && commitments.count == 1)
        return Fixture(
            world: world,
            vault: vault,
            password: password,
            doctor: doctor,
            patient: patient,
            share: share,
            honest: page.changes,
            commitments: commitments,
            staleCommitments: stale,
            oldRun: oldRun,
            mood: mood
        )
    }

    /// The server's honest page of the share, from the start.
    static func pullShare(
        _ doctor: DoctorReader,
        _ patient: Certificate,
        _ share: VerifiedShare
    ) async throws -> (
        page: PulledPage, commitments: [StateCommitment]
    ) {
        let query = ReplicaFeed(owner: patient.userID, tresor: share.tresor.id).query(since: 0)
        return try await doctor.transport.pullPage(query: query, after: 0, auth: try await doctor.auth)
    }

    /// One page a hostile server sends: its changes, whether it says it is the last, and its commitments.
    struct Page: Sendable {
        var changes: [PulledChange]
        var done = true
        var commitments: [StateCommitment] = []
    }

    /// What a reader made of a run of pulls: the records it keeps (record id to version id), those it
    /// holds aside, what it reported, and the error a pull threw.
    struct Outcome: Equatable, CustomStringConvertible {
        var kept: [String: String] = [:]
        var quarantined: [QuarantinedRecord] = []
        var problems: [[String]] = []
        var errors: [String] = []
        var description: String { "kept \(kept.count), quarantined \(quarantined.map(\.reason)), problems \(problems), errors \(errors)" }
    }

    /// An engine over `applier` whose server hands out `pages` in order.
    static func engine<A: ReplicaApplier>(_ feed: ReplicaFeed, _ applier: A, _ pages: [Page]) -> ReplicaEngine<A> {
        let next = NIOLockedValueBox(0)
        return ReplicaEngine(feed: feed, applier: applier) { _, after in
            let page = next.withLockedValue { i -> Page in
                defer { i += 1 }
                return i < pages.count ? pages[i] : Page(changes: [])
            }
            return (PulledPage(changes: page.changes, nextCursor: page.changes.last?.sequence ?? after, done: page.done), page.commitments)
        }
    }

    /// A fresh doctor's cache of the share after `pulls` (each a run of pages), on the new path or held to
    /// one signature check per record; `counter` counts the checks.
    static func doctorReads(
        _ f: Fixture,
        _ pulls: [[Page]],
        perRecordOnly: Bool,
        counter: PullSignatures.Counter = .init()
    ) async throws
        -> Outcome
    {
        let url = f.world.root.appendingPathComponent("cache-\(UUID().uuidString).sqlite")
        let cache = try DoctorCache(url: url)
        let applier = SharedReplica(cache: cache, patient: f.patient, share: f.share)
        let feed = ReplicaFeed(owner: f.patient.userID, tresor: f.share.tresor.id)
        var outcome = Outcome()
        for pages in pulls {
            do {
                let pulled = try await PullSignatures.$perRecordOnly.withValue(perRecordOnly) {
                    try await PullSignatures.$counter.withValue(counter) { try await engine(feed, applier, pages).pull() }
                }
                outcome.problems.append(pulled.problems)
            } catch { outcome.errors.append("\(error)") }
        }
        var after = ""
        while let page = try await cache.liveEnvelopes(owner: f.patient.userID, tresor: f.share.tresor.id, after: after, limit: 100) {
            after = page.last
            for bytes in page.envelopes {
                let env = try StoredEnvelope.decode(bytes)
                outcome.kept[env.header.recordID.hex] = env.versionID
            }
        }
        outcome.quarantined = try await cache.quarantined(owner: f.patient.userID, tresor: f.share.tresor.id)
        return outcome
    }

    /// A fresh device of the patient after `pulls` of its own feed, as `doctorReads`.
    static func patientReads(
        _ f: Fixture,
        _ pulls: [[Page]],
        perRecordOnly: Bool,
        counter: PullSignatures.Counter = .init()
    ) async throws
        -> Outcome
    {
        let vault = try await f.world.device("p-\(UUID().uuidString.prefix(8))").loginPatient("pat", password: f.password)
        // The tresors' keys, as a sync takes them before it pulls.
        try await vault.reconcileTresors()
        let feed = ReplicaFeed(owner: f.patient.userID)
        var outcome = Outcome()
        for pages in pulls {
            do {
                let pulled = try await PullSignatures.$perRecordOnly.withValue(perRecordOnly) {
                    try await PullSignatures.$counter.withValue(counter) { try await engine(feed, PatientReplica(vault: vault), pages).pull() }
                }
                outcome.problems.append(pulled.problems)
            } catch { outcome.errors.append("\(error)") }
        }
        for row in try vault.store.records() where !row.pending { outcome.kept[row.envelope.header.recordID.hex] = row.envelope.versionID }
        outcome.quarantined = try vault.store.quarantined()
        return outcome
    }

    /// `env` with one bit of its signature flipped (its version id changes with it).
    static func badSignature(_ env: Envelope) throws -> Envelope {
        var bytes = env.binary
        bytes[bytes.count - 1] ^= 1
        return try Envelope(binary: bytes)
    }

    /// `c` with a field its signature covers changed: digest, counts and HLC still match.
    static func badSignature(_ c: StateCommitment) -> StateCommitment {
        var c = c
        c.committedAt += 1
        return c
    }

    /// `changes` with the envelope of `record` replaced by `by`.
    static func swap(_ changes: [PulledChange], _ record: RecordID, by: Envelope) -> [PulledChange] {
        changes.map { $0.envelope?.header.recordID == record ? PulledChange(sequence: $0.sequence, envelope: by) : $0 }
    }

    @Test(arguments: Backend.allCases)
    func aPageThatMatchesItsCommitmentNeedsNoSignatureCheck(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let f = try await Self.fixture(world)
            let page = [Page(changes: f.honest, commitments: f.commitments)]
            let counter = PullSignatures.Counter()
            let fast = try await Self.doctorReads(f, [page], perRecordOnly: false, counter: counter)
            #expect(counter.value == 0, "no record's signature was checked")
            #expect(fast.kept == Dictionary(uniqueKeysWithValues: f.honest.map { ($0.recordID!, $0.envelope!.versionID) }))
            #expect(fast.quarantined.isEmpty && fast.errors.isEmpty && fast.problems == [[]])
            let slowCounter = PullSignatures.Counter()
            #expect(try await Self.doctorReads(f, [page], perRecordOnly: true, counter: slowCounter) == fast)
            #expect(slowCounter.value == 3, "the old path checks each record")

            // Through the real server: the doctor's view and a new device of the patient.
            let viewCounter = PullSignatures.Counter()
            let view = try await PullSignatures.$counter.withValue(viewCounter) { try await f.doctor.view(patient: "pat") }
            #expect(viewCounter.value == 0)
            #expect(view.activities.map(\.id) == ["run", "swim", "walk"] && view.activities.first?.title == "Run")
            #expect(view.complete && view.quarantined.isEmpty)
            let device = try await world.device("b").loginPatient("pat", password: f.password)
            let syncCounter = PullSignatures.Counter()
            let summary = try await PullSignatures.$counter.withValue(syncCounter) { try await device.sync() }
            #expect(syncCounter.value == 0, "every tresor's records were authenticated by its commitment")
            #expect(summary.pulled == 4 && summary.quarantined.isEmpty)
            #expect(try await device.activities().map(\.id) == ["mood", "run", "swim", "walk"])
            #expect(try await device.activity(id: "run")?.title == "Run")
        }
    }

    /// The honest page with a badly signed copy of run's first version just before run's head.
    static func forgedBeforeRun(_ f: Fixture) throws -> [PulledChange] {
        let head = f.honest.first { $0.recordID == f.oldRun.header.recordID.hex }!
        let forged = PulledChange(sequence: head.sequence - 1, envelope: try badSignature(f.oldRun))
        return f.honest.flatMap { $0.sequence == head.sequence ? [forged, $0] : [$0] }
    }

    @Test(arguments: Backend.allCases)
    func aSwappedEnvelopeFallsBackToCheckingEachRecord(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let f = try await Self.fixture(world)
            let rid = f.oldRun.header.recordID
            let moodID = f.mood.header.recordID.hex
            let badRun = try Self.badSignature(f.run)
            let honestPull = [Page(changes: f.honest, commitments: f.commitments)]
            // Each: the pulls, the records then held aside with why, whether the mismatch itself is reported
            // (a held-aside record already says the set cannot be whole), and the signature checks run.
            let cases: [(name: String, pulls: [[Page]], held: [String: QuarantineReason], mismatch: Bool, checks: Int)] = [
                // An older version of the same record, validly signed: not the head the patient committed to.
                ("an older version", [[Page(changes: Self.swap(f.honest, rid, by: f.oldRun), commitments: f.commitments)]], [:], true, 3),
                // The same, to a reader that holds the newer one: a replay, kept aside.
                (
                    "an older version replayed",
                    [honestPull, [Page(changes: [PulledChange(sequence: f.last + 1, envelope: f.oldRun)], commitments: f.commitments)]],
                    [rid.hex: .replayed], false, 1
                ),
                // A validly signed record of the patient's other tresor.
                (
                    "a record of another tresor", [[Page(changes: Self.swap(f.honest, rid, by: f.mood), commitments: f.commitments)]],
                    [moodID: .wrongContext], false, 3
                ),
                (
                    "a bad signature", [[Page(changes: Self.swap(f.honest, rid, by: badRun), commitments: f.commitments)]],
                    [rid.hex: .invalidSignature], false, 3
                ),
                // A forged earlier version of a record before its head in the same page: the head replaces it
                // before the digest is computed, so the digest says nothing of it, and each record is checked.
                (
                    "a forged version before the head",
                    [[Page(changes: try Self.forgedBeforeRun(f), commitments: f.commitments)]],
                    [:], false, 4
                ),
            ]
            for c in cases {
                let counter = PullSignatures.Counter()
                let fast = try await Self.doctorReads(f, c.pulls, perRecordOnly: false, counter: counter)
                let slow = try await Self.doctorReads(f, c.pulls, perRecordOnly: true)
                #expect(fast == slow, "\(c.name): \(fast) against \(slow)")
                #expect(
                    Dictionary(uniqueKeysWithValues: fast.quarantined.map { ($0.recordID!, $0.reason) }) == c.held,
                    "\(c.name): exactly that record is held aside"
                )
                let others = f.honest.compactMap(\.envelope).filter { $0.header.recordID != rid }
                #expect(others.allSatisfy { fast.kept[$0.header.recordID.hex] == $0.versionID }, "\(c.name): nothing else is lost")
                let mismatch = fast.problems.last?.first?.contains("not the set the patient committed to") ?? false
                #expect(mismatch == c.mismatch, "\(c.name): \(fast.problems)")
                #expect(counter.value == c.checks, "\(c.name): the records were checked one by one")
            }
        }
    }

    @Test(arguments: Backend.allCases)
    func aMatchingCommitmentWithABadSignatureIsRefused(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let f = try await Self.fixture(world)
            let bad = f.commitments.map(Self.badSignature)
            let page = [[Page(changes: f.honest, commitments: bad)]]
            let counter = PullSignatures.Counter()
            let fast = try await Self.doctorReads(f, page, perRecordOnly: false, counter: counter)
            #expect(fast == (try await Self.doctorReads(f, page, perRecordOnly: true)))
            #expect(counter.value == 3, "each record was checked on its own")
            #expect(fast.problems.first?.first?.contains("does not verify") == true)
            #expect(fast.quarantined.isEmpty && fast.kept.count == 3, "the records themselves are the patient's")

            // A new device of the patient refuses it the same way, through the same engine.
            let patientPage = try await Self.patientPages(f, commitments: { $0.map(Self.badSignature) })
            let patientCounter = PullSignatures.Counter()
            let mine = try await Self.patientReads(f, [patientPage], perRecordOnly: false, counter: patientCounter)
            #expect(mine.problems.first?.contains { $0.contains("does not verify") } == true)
            #expect(patientCounter.value == 4)
            #expect(mine == (try await Self.patientReads(f, [patientPage], perRecordOnly: true)))
        }
    }

    /// The patient's own feed from the start as one final page, its commitments passed through `commitments`.
    static func patientPages(_ f: Fixture, commitments: ([StateCommitment]) -> [StateCommitment] = { $0 }) async throws -> [Page] {
        let query = ReplicaFeed(owner: f.patient.userID).query(since: 0)
        let (page, shown) = try await f.vault.transport.pullPage(query: query, after: 0, auth: try await f.vault.auth)
        #expect(page.done && page.changes.count == 4 && shown.count == 2)
        return [Page(changes: page.changes, commitments: commitments(shown))]
    }

    /// A small deterministic generator, so a failing case can be run again.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// A run of pulls a hostile server might send: each change kept, dropped, swapped for another validly
    /// signed envelope, or given a bad signature; pages split at random; commitments honest, missing,
    /// stale, badly signed or shown twice; sometimes an old version replayed in a second pull.
    static func generated(
        _ honest: [PulledChange],
        _ commitments: [StateCommitment],
        stale: [StateCommitment],
        others: [Envelope],
        rng: inout SplitMix
    )
        throws -> [[Page]]
    {
        var changes: [PulledChange] = []
        for change in honest {
            switch Int.random(in: 0..<8, using: &rng) {
            case 0: continue
            case 1: changes.append(PulledChange(sequence: change.sequence, envelope: others.randomElement(using: &rng)!))
            case 2: changes.append(PulledChange(sequence: change.sequence, envelope: try badSignature(change.envelope!)))
            default: changes.append(change)
            }
        }
        let shown: [StateCommitment]
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: shown = []
        case 1: shown = stale
        case 2: shown = commitments.map(badSignature)
        case 3: shown = commitments + commitments.prefix(1).map(badSignature)
        default: shown = commitments
        }
        var pages: [Page] = []
        var rest = changes[...]
        while rest.count > 1, Bool.random(using: &rng) {
            let n = Int.random(in: 1..<rest.count, using: &rng)
            pages.append(Page(changes: Array(rest.prefix(n)), done: false))
            rest = rest.dropFirst(n)
        }
        pages.append(Page(changes: Array(rest), commitments: shown))
        var pulls = [pages]
        if Int.random(in: 0..<4, using: &rng) == 0, let last = honest.last {
            let replayed = PulledChange(sequence: last.sequence + 1, envelope: others.randomElement(using: &rng)!)
            pulls.append([Page(changes: [replayed], commitments: Bool.random(using: &rng) ? commitments : shown)])
        }
        return pulls
    }

    @Test(arguments: Backend.allCases)
    func bothPathsAcceptAndRefuseTheSamePages(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let f = try await Self.fixture(world)
            let others = [f.oldRun, f.mood, try Self.badSignature(f.oldRun)]
            var rng = SplitMix(state: 0x00C0_FFEE)
            var fastChecks = 0
            var slowChecks = 0
            // What kinds of outcome the generated pages led to: every kind must have come up.
            var kinds = Set<String>()
            for i in 0..<40 {
                let pulls = try Self.generated(f.honest, f.commitments, stale: f.staleCommitments, others: others, rng: &rng)
                let fastCounter = PullSignatures.Counter()
                let slowCounter = PullSignatures.Counter()
                let fast = try await Self.doctorReads(f, pulls, perRecordOnly: false, counter: fastCounter)
                let slow = try await Self.doctorReads(f, pulls, perRecordOnly: true, counter: slowCounter)
                #expect(fast == slow, "case \(i): \(fast) against \(slow)")
                // Pages held in memory (the default) or written pending at once: the same outcome.
                let written = try await HeldPages.$budget.withValue(0) { try await Self.doctorReads(f, pulls, perRecordOnly: false) }
                #expect(written == fast, "case \(i), every page written pending: \(written) against \(fast)")
                #expect(fastCounter.value <= slowCounter.value, "case \(i)")
                fastChecks += fastCounter.value
                slowChecks += slowCounter.value
                if !fast.quarantined.isEmpty { kinds.insert("held aside") }
                if fast.problems.contains(where: { !$0.isEmpty }) { kinds.insert("reported") }
                if fast.quarantined.isEmpty, fast.problems.allSatisfy(\.isEmpty) { kinds.insert("clean") }
                if fastCounter.value == 0 { kinds.insert("no check") }
                if fastCounter.value > 0, fastCounter.value < slowCounter.value { kinds.insert("fewer checks") }
            }
            #expect(fastChecks < slowChecks, "some generated pages were authenticated by their commitment")
            #expect(kinds == ["held aside", "reported", "clean", "no check", "fewer checks"], "\(kinds)")

            // The patient's own feed, two tresors in one page, through the same engine.
            let own = try await Self.patientPages(f)[0]
            let ownOthers = [f.oldRun, try Self.badSignature(f.mood)]
            var patientFast = 0
            var patientSlow = 0
            for i in 0..<8 {
                let pulls = try Self.generated(
                    own.changes,
                    own.commitments,
                    stale: Array(own.commitments.prefix(1)),
                    others: ownOthers,
                    rng: &rng
                )
                let fastCounter = PullSignatures.Counter()
                let slowCounter = PullSignatures.Counter()
                let fast = try await Self.patientReads(f, pulls, perRecordOnly: false, counter: fastCounter)
                let slow = try await Self.patientReads(f, pulls, perRecordOnly: true, counter: slowCounter)
                #expect(fast == slow, "patient case \(i): \(fast) against \(slow)")
                #expect(fastCounter.value <= slowCounter.value, "patient case \(i)")
                patientFast += fastCounter.value
                patientSlow += slowCounter.value
            }
            #expect(patientFast < patientSlow, "some of the patient's pages were authenticated by their commitments")
        }
    }
}
