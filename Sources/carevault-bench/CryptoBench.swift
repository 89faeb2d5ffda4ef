import Foundation
import VaultCore
import VaultCrypto

/// Keeps benchmark results observable, so no work is optimised away.
nonisolated(unsafe) var benchSink: Int = 0

/// Records/s of `Envelope.seal` and `Envelope.open` against raw libsodium on the same bytes (Docs/benchmarks.md §1).
struct CryptoResult: Sendable {
    var size: RecordSize
    var payloadBytes: Int
    var ciphertextBytes: Int
    var sealRps: Double
    var sealFloorRps: Double
    var openRps: Double
    var openFloorRps: Double
    /// With the record's JSON encoding / decoding (Envelope.seal(record:) / openRecord), for context.
    var sealRecordRps: Double
    var openRecordRps: Double

    /// Medians of the per-rep ratios (each rep of the envelope next to the floor's rep of the same round).
    var sealRatio: Double
    var openRatio: Double
    var sealRecordRatio: Double
    var openRecordRatio: Double
}

struct CryptoBench {
    let plan: BenchPlan

    func run() throws -> [CryptoResult] {
        try RecordSize.allCases.map { try run($0) }
    }

    /// One size: the six operations run interleaved rep by rep (so drift in machine speed hits figure
    /// and floor alike), after one warm-up rep each; each rate is the median rep, each ratio the median
    /// of the ratios of the same round's reps.
    func run(_ size: RecordSize) throws -> CryptoResult {
        let identity = Identity.generate()
        let tresor = Tresor.create(ownerID: identity.userID, category: BenchRecords.category)
        let key = tresor.currentKey
        let keys = tresor.keys
        let author = identity.signing
        let authorKey = identity.signing.publicKey
        let context = EnvelopeContext(ownerID: identity.userID, tresorID: tresor.id, category: tresor.category)
        let note = String(repeating: "x", count: try BenchRecords.noteLength(for: size))
        let outcome = BenchRecords.outcome(occurrence: 5_000, note: note)
        let rid = RecordID.make(type: .outcome, activityID: BenchRecords.activityID, occurrence: 5_000, key: identity.recordIDKey)
        let header = BenchRecords.header(owner: identity, tresor: tresor, recordID: rid, counter: 0)
        let sample = try Envelope.seal(record: .outcome(outcome), type: .outcome, header: header, key: key, author: author)
        let payload = try sample.open(keys: keys, authorKey: authorKey, expecting: context)

        // Distinct sealed items to open, cycled, so no cache holds one record's result.
        let variety = 64
        let envelopes = try (0..<variety).map { _ in try Envelope.seal(payload: payload, header: header, key: key, author: author) }
        let floor = RawEnvelopeFloor(
            plaintextCount: sample.ciphertext.count - AEAD.tagByteCount,
            ad: header.associatedData(),
            signedCount: sample.signedBytes.count
        )
        var sealBlob = floor.makeBlob()
        let blobs = floor.sealedBlobs(variety)
        guard blobs.allSatisfy({ b in b.withUnsafeBytes { floor.open($0) } }) else { throw BenchError("raw floor does not open its own items") }

        let ops: [(String, (Int) throws -> Void)] = [
            ("seal", { _ in benchSink &+= Int(try Envelope.seal(payload: payload, header: header, key: key, author: author).signature.bytes[0]) }),
            (
                "seal floor",
                { _ in
                    sealBlob.withUnsafeMutableBytes { floor.seal(into: $0) }
                    benchSink &+= Int(sealBlob[sealBlob.count - 1])
                }
            ),
            ("open", { i in benchSink &+= try envelopes[i % variety].open(keys: keys, authorKey: authorKey, expecting: context).count }),
            (
                "open floor",
                { i in
                    guard blobs[i % variety].withUnsafeBytes({ floor.open($0) }) else { throw BenchError("raw open failed") }
                    benchSink &+= 1
                }
            ),
            (
                "seal record",
                { _ in
                    benchSink &+= Int(
                        try Envelope.seal(record: .outcome(outcome), type: .outcome, header: header, key: key, author: author).signature.bytes[0]
                    )
                }
            ),
            (
                "open record",
                { i in
                    if try envelopes[i % variety].openRecord(keys: keys, authorKey: authorKey, expecting: context).record != nil { benchSink &+= 1 }
                }
            ),
        ]
        // Calibrate each operation so one rep lasts about `plan.cryptoRepSeconds`.
        var counts: [Int] = []
        for (_, op) in ops {
            let (_, t) = try Measure.time { for i in 0..<32 { try op(i) } }
            counts.append(max(32, Int(plan.cryptoRepSeconds / max(t / 32, 1e-7))))
        }
        var rates = [[Double]](repeating: [], count: ops.count)
        for rep in 0...plan.cryptoReps {
            for (k, (_, op)) in ops.enumerated() {
                let n = counts[k]
                let (_, t) = try Measure.time { for i in 0..<n { try op(i) } }
                if rep > 0 { rates[k].append(Double(n) / t) }  // rep 0 is the warm-up
            }
        }
        let m = rates.map(Measure.median)
        func ratio(_ k: Int, _ floor: Int) -> Double { Measure.median(zip(rates[k], rates[floor]).map { $0 / $1 }) }
        let result = CryptoResult(
            size: size,
            payloadBytes: payload.count,
            ciphertextBytes: sample.ciphertext.count,
            sealRps: m[0],
            sealFloorRps: m[1],
            openRps: m[2],
            openFloorRps: m[3],
            sealRecordRps: m[4],
            openRecordRps: m[5],
            sealRatio: ratio(0, 1),
            openRatio: ratio(2, 3),
            sealRecordRatio: ratio(4, 1),
            openRecordRatio: ratio(5, 3)
        )
        Progress.say(
            "crypto \(size.label): seal \(fmt(result.sealRps, 0))/s (floor \(fmt(result.sealFloorRps, 0))/s, ratio \(fmt(result.sealRatio, 2))), "
                + "open \(fmt(result.openRps, 0))/s (floor \(fmt(result.openFloorRps, 0))/s, ratio \(fmt(result.openRatio, 2)))"
        )
        return result
    }
}
