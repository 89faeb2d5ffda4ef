import Foundation
import FuzzSupport
import VaultAPI
import VaultCrypto

@testable import VaultCore

/// Record payloads (the JSON inside the ciphertext, Docs/envelope-v1.md §4.2) signed by the patient, so
/// only the reader's own checks stand between the bytes and the care model: decoded, validated, and
/// then used the way the tools use them (occurrences, adherence, merges). The direct reader
/// (PayloadParser) is held to JSONDecoder's answer on every input. The first byte picks the record type
/// (bit 0) and the deleted flag (bit 1).
let payloadEncoder: JSONEncoder = {
    let e = JSONEncoder()
    e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    e.dateEncodingStrategy = .millisecondsSince1970
    return e
}()

func json(_ type: String, _ key: String, _ body: some Encodable) -> [UInt8] {
    Array(#"{"type":"\#(type)","\#(key)":"#.utf8) + Array(try! payloadEncoder.encode(body)) + Array("}".utf8)
}

func seeds() -> [[UInt8]] {
    [
        [0] + json("activity", "activity", FuzzFixture.sampleActivity()), [1] + json("outcome", "outcome", FuzzFixture.sampleOutcome()),
        [2] + Array(#"{"type":"activity"}"#.utf8),
    ]
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> CInt {
    writeSeedsIfAsked(seeds)
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    fuzzInput(data, size) { bytes in
        guard let flags = bytes.first else { return }
        // The direct payload reader either gives up or reads exactly what JSONDecoder reads.
        let payload = Array(bytes.dropFirst())
        if let direct = PayloadParser.decode(payload) {
            // Equal, and equal again once encoded: == alone takes -0.0 for 0.0 and canonically equivalent text as one.
            let reference = try? RecordPayload.decodeWithFoundation(payload)
            precondition(direct == reference, "the direct payload reader disagrees with JSONDecoder")
            precondition(
                (try? RecordPayload.encoder.encode(direct)) == reference.flatMap { try? RecordPayload.encoder.encode($0) },
                "the direct payload reader disagrees with JSONDecoder once encoded"
            )
        }
        let type: RecordType = flags & 1 == 0 ? .activity : .outcome
        let envelope = FuzzFixture.seal(payload: Array(bytes.dropFirst()), type: type, deleted: flags & 2 != 0)
        guard
            let opened = try? envelope.openRecord(
                keys: FuzzFixture.tresor.keys,
                authorKey: FuzzFixture.patient.signing.publicKey,
                expecting: FuzzFixture.context
            )
        else { return }
        let week = (FuzzFixture.start, FuzzFixture.start.addingTimeInterval(7 * 86_400))
        switch opened.record {
        case let .activity(activity)?:
            _ = try? activity.schedule.events(from: week.0, to: week.1)
            for occurrence in [0, 1, 1_000, Outcome.maxOccurrence] { _ = activity.schedule.event(occurrence: occurrence) }
            _ = try? Adherence.rows(activities: [activity], outcomes: [FuzzFixture.sampleOutcome()], from: week.0, to: week.1)
        case let .outcome(outcome)?:
            let sample = FuzzFixture.sampleOutcome()
            let merged = Reconciliation.mergeOutcomes(outcome, sample)
            precondition(Reconciliation.sameContent(merged, Reconciliation.mergeOutcomes(sample, outcome)), "merge is not commutative")
            precondition(Reconciliation.sameContent(Reconciliation.mergeOutcomes(merged, outcome), merged), "merge is not idempotent")
            _ = try? Adherence.rows(activities: [FuzzFixture.sampleActivity()], outcomes: [outcome], from: week.0, to: week.1)
        case nil:
            break
        }
    }
}
