import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// Fixed keys and identities for the fuzz targets: the same on every run, so a crashing input replays.
/// Nothing here is secret; these keys exist only in fuzzing.
public enum FuzzFixture {
    /// Bytes 0, 1, 2, … offset by `tag`, as key material.
    static func bytes(_ tag: UInt8, count: Int = 32) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0) &+ tag } }

    static func signing(_ tag: UInt8) -> SigningKeyPair { try! SigningKeyPair(seed: SecureBytes(copying: bytes(tag))) }
    static func box(_ tag: UInt8) -> BoxKeyPair { try! BoxKeyPair(secretKey: SecureBytes(copying: bytes(tag))) }

    /// The admin key pair whose public half the targets pin.
    public static let admin = signing(1)
    /// A patient with a certificate under `admin`.
    public static let patient = Identity(
        userID: UUID(uuid: (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)),
        signing: signing(2),
        box: box(3),
        recordIDKey: try! SymmetricKey(bytes: bytes(4))
    )
    /// A doctor with a certificate under `admin`.
    public static let doctor = Identity(
        userID: UUID(uuid: (2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2)),
        signing: signing(5),
        box: box(6),
        recordIDKey: try! SymmetricKey(bytes: bytes(7))
    )
    public static let patientCertificate = try! Certificate.issue(
        userID: patient.userID,
        username: "alice",
        role: .patient,
        signingKey: patient.signing.publicKey,
        boxKey: patient.box.publicKey,
        issuedAt: 1_767_000_000_000,
        adminKey: admin
    )
    public static let doctorCertificate = try! Certificate.issue(
        userID: doctor.userID,
        username: "drbob",
        role: .doctor,
        signingKey: doctor.signing.publicKey,
        boxKey: doctor.box.publicKey,
        issuedAt: 1_767_000_000_000,
        adminKey: admin
    )
    /// The patient's `interventions` tresor with two fixed epoch keys.
    public static let tresor = Tresor(
        ownerID: patient.userID,
        category: "interventions",
        keys: [1: try! SymmetricKey(bytes: bytes(8)), 2: try! SymmetricKey(bytes: bytes(9))]
    )
    /// What a reader of the patient's tresor expects.
    public static let context = EnvelopeContext(ownerID: patient.userID, tresorID: tresor.id, category: tresor.category)

    /// A header for a record of `type` in the fixture tresor.
    public static func header(_ type: RecordType, deleted: Bool = false, occurrence: Int? = nil) -> RecordHeader {
        RecordHeader(
            ownerID: patient.userID,
            tresorID: tresor.id,
            category: tresor.category,
            epoch: 2,
            recordType: type,
            recordID: RecordID.make(
                type: type,
                activityID: "walk",
                occurrence: type == .outcome ? (occurrence ?? 3) : nil,
                key: patient.recordIDKey
            ),
            timestamp: HLCTimestamp(physicalMs: 1_767_000_000_000, counter: 1, deviceID: "fuzz-device"),
            deleted: deleted,
            authorID: patient.userID
        )
    }

    /// Seals `payload` as the patient under the fixture tresor's current key.
    public static func seal(payload: [UInt8], type: RecordType, deleted: Bool = false) -> Envelope {
        try! Envelope.seal(payload: payload, header: header(type, deleted: deleted), key: tresor.currentKey, author: patient.signing)
    }

    /// The JSON coders every wire type of the API uses.
    public static let decoder = JSONDecoder()
    public static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// A fixed instant and a sample activity and outcome, for seeds.
    public static let start = Date(unixMillis: 1_767_000_000_000)
    public static func sampleActivity() -> Activity {
        let utc = TimeZone(identifier: "UTC")!
        let schedule =
            try! Schedule.weekly(start: start, weekdays: [2, 5], at: DateComponents(hour: 9, minute: 0), timeZone: utc)
            + Schedule(elements: [try! ScheduleElement(start: start, interval: .hours(6), timeZoneIdentifier: "Europe/Berlin")])
        return try! Activity(id: "walk", title: "Walk 30 minutes", category: "interventions", schedule: schedule, createdAt: start)
    }
    public static func sampleOutcome() -> Outcome {
        Outcome(
            activityID: "walk",
            occurrence: 3,
            values: [OutcomeValue(id: "v1", value: .number(3.5), units: "km", createdAt: start)],
            removedValueIDs: ["v0"],
            note: "felt fine",
            createdAt: start
        )
    }
}

/// Whatever decodes must encode, and decode again to the same value.
public func assertRoundTrip<T: Codable & Equatable>(_ value: T, _ what: String) {
    let again = try! FuzzFixture.encoder.encode(value)
    precondition(try! FuzzFixture.decoder.decode(T.self, from: again) == value, "\(what) round trip differs")
}

extension FuzzFixture {
    /// A sealed activity and a sealed outcome of the patient: seeds for the envelope and push-body targets.
    public static func sampleEnvelopes() -> [Envelope] {
        let activity = try! Envelope.seal(
            record: .activity(sampleActivity()),
            type: .activity,
            header: header(.activity),
            key: tresor.currentKey,
            author: patient.signing
        )
        let outcome = try! Envelope.seal(
            record: .outcome(sampleOutcome()),
            type: .outcome,
            header: header(.outcome),
            key: tresor.currentKey,
            author: patient.signing
        )
        return [activity, outcome]
    }

    /// The patient's grant of the fixture tresor to the doctor: seeds for the approval and grant targets.
    public static func doctorGrant() -> Grant {
        try! Grant.make(
            patient: patient,
            member: doctorCertificate,
            adminKey: admin.publicKey,
            tresor: tresor,
            createdAt: 1_767_000_000_000,
            expiresAt: 1_800_000_000_000
        )
    }
}

/// Runs `body` over the fuzzer's input. Decoding failures are expected; only a trap or a sanitizer
/// report is a finding.
public func fuzzInput(_ data: UnsafePointer<UInt8>, _ size: Int, _ body: ([UInt8]) -> Void) -> CInt {
    body(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

/// When `CAREVAULT_FUZZ_WRITE_SEEDS` names a folder, writes `seeds` there as files `seed-N` and exits:
/// Scripts/fuzz --seeds refreshes the committed corpus this way.
public func writeSeedsIfAsked(_ seeds: () -> [[UInt8]]) {
    guard let folder = ProcessInfo.processInfo.environment["CAREVAULT_FUZZ_WRITE_SEEDS"] else { return }
    let url = URL(fileURLWithPath: folder, isDirectory: true)
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    for (i, seed) in seeds().enumerated() {
        FileManager.default.createFile(atPath: url.appendingPathComponent("seed-\(i)").path, contents: Data(seed))
    }
    exit(0)
}
