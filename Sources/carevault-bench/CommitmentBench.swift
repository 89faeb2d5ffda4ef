import Foundation
import VaultCore
import VaultCrypto

/// What a state commitment costs (Docs/envelope-v1.md §3.4): the LtHash update of one changed head (one
/// removal and one addition), and one signature and one verification, each next to the envelope open it
/// accompanies, so the figures read as a share of the work already done per record.
struct CommitmentResult: Sendable {
    /// Microseconds to replace one record's head in a tresor's `HeadSet` (what each pushed or pulled change costs).
    var usPerRecord: Double
    /// Microseconds to sign one commitment (once per push batch and tresor).
    var signUs: Double
    /// Microseconds to verify one commitment (once per completed pull and tresor).
    var verifyUs: Double
    /// Microseconds to open (verify and decrypt) one 500 B envelope, measured in the same run.
    var openUs: Double
    /// `usPerRecord` over `openUs`: the commitment's share of a reader's work per record.
    var perRecordShareOfOpen: Double
}

struct CommitmentBench {
    let plan: BenchPlan

    func run() throws -> CommitmentResult {
        let identity = Identity.generate()
        let certificate = try Certificate.issue(
            userID: identity.userID,
            username: "bench",
            role: .patient,
            signingKey: identity.signing.publicKey,
            boxKey: identity.box.publicKey,
            issuedAt: 1_700_000_000_000,
            adminKey: SigningKeyPair.generate()
        )
        let tresor = Tresor.create(ownerID: identity.userID, category: BenchRecords.category)
        let records = 2_000
        let ids = (0..<records).map { _ in Hex.encode(RandomBytes.bytes(count: 32)) }
        let versions = (0..<records).map { _ in Hex.encode(RandomBytes.bytes(count: 32)) }
        let newer = (0..<records).map { _ in Hex.encode(RandomBytes.bytes(count: 32)) }
        let at = HLCTimestamp(physicalMs: 1_700_000_000_000, counter: 0, deviceID: "bench")

        var state = HeadSet()
        for i in 0..<records {
            try state.replace(recordID: ids[i], old: nil, with: .init(versionID: versions[i], deleted: false, timestamp: at))
        }
        // Each rep replaces every head by a newer version and back: 2 × records updates.
        var perRecord: [Double] = []
        for _ in 0..<max(plan.cryptoReps, 3) {
            let (_, seconds) = try Measure.time {
                for i in 0..<records {
                    try state.replace(
                        recordID: ids[i],
                        old: .init(versionID: versions[i], deleted: false, timestamp: at),
                        with: .init(versionID: newer[i], deleted: false, timestamp: at)
                    )
                }
                for i in 0..<records {
                    try state.replace(
                        recordID: ids[i],
                        old: .init(versionID: newer[i], deleted: false, timestamp: at),
                        with: .init(versionID: versions[i], deleted: false, timestamp: at)
                    )
                }
            }
            perRecord.append(seconds / Double(2 * records) * 1e6)
        }
        benchSink &+= Int(state.hash.digest.first ?? 0)

        let signings = 200
        var commitment: StateCommitment?
        let (_, signSeconds) = Measure.time {
            for n in 0..<signings {
                commitment = StateCommitment.make(
                    patient: identity,
                    tresorID: tresor.id,
                    category: tresor.category,
                    sequence: UInt64(n + 1),
                    state: state,
                    topEpoch: 1,
                    tresorVersion: 1,
                    committedAt: 1_700_000_000_000
                )
            }
        }
        guard let commitment else { throw BenchError("no commitment was made") }
        let (_, verifySeconds) = try Measure.time {
            for _ in 0..<signings {
                try commitment.verify(patient: certificate, tresorID: tresor.id, category: tresor.category)
                benchSink &+= commitment.describes(state) ? 1 : 0
            }
        }
        let open = try openMicroseconds(identity: identity, tresor: tresor)
        let us = Measure.median(perRecord)
        return CommitmentResult(
            usPerRecord: us,
            signUs: signSeconds / Double(signings) * 1e6,
            verifyUs: verifySeconds / Double(signings) * 1e6,
            openUs: open,
            perRecordShareOfOpen: us / open
        )
    }

    /// Microseconds per `Envelope.open` of a 500 B outcome, on the same machine in the same run.
    private func openMicroseconds(identity: Identity, tresor: Tresor) throws -> Double {
        let note = String(repeating: "x", count: try BenchRecords.noteLength(for: .small))
        let rid = RecordID.make(type: .outcome, activityID: BenchRecords.activityID, occurrence: 1, key: identity.recordIDKey)
        let header = BenchRecords.header(owner: identity, tresor: tresor, recordID: rid, counter: 0)
        let envelope = try Envelope.seal(
            record: .outcome(BenchRecords.outcome(occurrence: 1, note: note)),
            type: .outcome,
            header: header,
            key: tresor.currentKey,
            author: identity.signing
        )
        let context = EnvelopeContext(ownerID: identity.userID, tresorID: tresor.id, category: tresor.category)
        let opens = 2_000
        let (_, seconds) = try Measure.time {
            for _ in 0..<opens {
                benchSink &+= try envelope.open(keys: tresor.keys, authorKey: identity.signing.publicKey, expecting: context).count
            }
        }
        return seconds / Double(opens) * 1e6
    }
}
