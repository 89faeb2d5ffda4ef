import Foundation
import VaultCore
import VaultCrypto

/// The two record sizes of the issue. Sizes are of the envelope's ciphertext (padded payload + tag):
/// the payload lands in the Padmé bucket of 480 bytes (ciphertext 496 B) or of 16 KiB (ciphertext 16,400 B).
enum RecordSize: String, CaseIterable, Sendable {
    case small = "500"
    case large = "16k"

    /// The JSON payload length aimed at: in the middle of the bucket, so the few bytes by which
    /// occurrence numbers differ never move a record to another bucket.
    var targetPayloadBytes: Int { self == .small ? 472 : 16_000 }
    /// The bucket the payload must pad to (ciphertext = bucket + 16).
    var bucket: Int { self == .small ? 480 : 16_384 }
    var label: String { self == .small ? "500 B" : "16 KiB" }
    var key: String { rawValue }
}

/// How the benchmark's records look: one activity, and outcomes of it whose note sets the size.
enum BenchRecords {
    static let activityID = "bench-walk"
    static let category = "assessments"
    static let start = Date(unixMillis: 1_767_254_400_000)  // 2026-01-01T08:00:00Z

    static func activity(id: String = activityID, title: String = "Walk", category: String = category) throws -> Activity {
        try Activity(
            id: id,
            title: title,
            category: category,
            schedule: Schedule.dailyAtTimes(
                start: start,
                times: [DateComponents(hour: 8, minute: 0)],
                timeZone: TimeZone(identifier: "UTC")!
            ),
            createdAt: start
        )
    }

    /// The value every benchmark outcome records (a constant, so payload lengths depend only on the note).
    static func value(at date: Date) -> OutcomeValue {
        OutcomeValue(value: .number(7), units: "steps", createdAt: Date(unixMillis: date.unixMillis))
    }

    /// An outcome as `PatientVault.recordOutcome` builds it.
    static func outcome(activityID: String = activityID, occurrence: Int, note: String, at date: Date = Date()) -> Outcome {
        let ms = Date(unixMillis: date.unixMillis)
        return Outcome(activityID: activityID, occurrence: occurrence, values: [value(at: ms)], note: note, createdAt: ms, updatedAt: ms)
    }

    static func header(
        owner: Identity,
        tresor: Tresor,
        type: RecordType = .outcome,
        recordID: RecordID,
        counter: UInt32,
        deviceID: String = "dev-0123456789abcdef",
        physicalMs: UInt64 = UInt64(Date().unixMillis)
    ) -> RecordHeader {
        RecordHeader(
            ownerID: owner.userID,
            tresorID: tresor.id,
            category: tresor.category,
            epoch: tresor.currentEpoch,
            recordType: type,
            recordID: recordID,
            timestamp: HLCTimestamp(physicalMs: physicalMs, counter: counter, deviceID: deviceID),
            deleted: false,
            authorID: owner.userID
        )
    }

    /// The note length that makes an outcome's payload `size.targetPayloadBytes` long, found by sealing
    /// a sample and reading its payload back; checked against the expected bucket.
    static func noteLength(for size: RecordSize) throws -> Int {
        let identity = Identity.generate()
        let tresor = Tresor.create(ownerID: identity.userID, category: category)
        func payloadLength(_ noteLength: Int) throws -> (payload: Int, ciphertext: Int) {
            let o = outcome(occurrence: 5_000, note: String(repeating: "x", count: noteLength))
            let rid = RecordID.make(type: .outcome, activityID: activityID, occurrence: 5_000, key: identity.recordIDKey)
            let env = try Envelope.seal(
                record: .outcome(o),
                type: .outcome,
                header: header(owner: identity, tresor: tresor, recordID: rid, counter: 0),
                key: tresor.currentKey,
                author: identity.signing
            )
            let payload = try env.open(keys: tresor.keys, authorKey: identity.signing.publicKey)
            return (payload.count, env.ciphertext.count)
        }
        let probe = 100
        let base = try payloadLength(probe)
        let length = probe + size.targetPayloadBytes - base.payload
        let check = try payloadLength(length)
        guard check.payload == size.targetPayloadBytes, check.ciphertext == size.bucket + AEAD.tagByteCount else {
            throw BenchError("record sizing for \(size.label) failed: payload \(check.payload) B, ciphertext \(check.ciphertext) B")
        }
        return length
    }
}

/// A failure of the benchmark itself (a wrong count, an unexpected answer), with a message.
struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
