import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// A patient, a tresor and a sealed envelope to attack.
struct EnvelopeFixture {
    let patient = Identity.generate()
    var tresor: Tresor
    let payload = Array(#"{"type":"activity","activity":{"id":"walk"}}"#.utf8)
    var header: RecordHeader
    var envelope: Envelope
    var context: EnvelopeContext { EnvelopeContext(ownerID: patient.userID, tresorID: tresor.id, category: tresor.category) }

    init() throws {
        tresor = Tresor.create(ownerID: patient.userID, category: "interventions")
        header = RecordHeader(
            ownerID: patient.userID,
            tresorID: tresor.id,
            category: "interventions",
            epoch: 1,
            recordType: .activity,
            recordID: RecordID.make(type: .activity, activityID: "walk", occurrence: nil, key: patient.recordIDKey),
            timestamp: HLCTimestamp(physicalMs: 1_700_000_000_000, counter: 3, deviceID: "device-a"),
            deleted: false,
            authorID: patient.userID
        )
        envelope = try Envelope.seal(payload: payload, header: header, key: tresor.currentKey, author: patient.signing)
    }

    func open(_ e: Envelope, keys: [UInt32: SymmetricKey]? = nil, context: EnvelopeContext? = nil) throws(EnvelopeError) -> [UInt8] {
        try e.open(keys: keys ?? tresor.keys, authorKey: patient.signing.publicKey, expecting: context ?? self.context)
    }
}

@Suite("Record envelope v1")
struct EnvelopeTests {
    @Test func sealOpenRoundTripAndWireFormat() throws {
        let f = try EnvelopeFixture()
        #expect(try f.open(f.envelope) == f.payload)
        #expect(f.envelope.ciphertext.count == 256 + AEAD.tagByteCount, "a short payload fills the smallest bucket")
        let wire = try JSONDecoder().decode(Envelope.self, from: JSONEncoder().encode(f.envelope))
        #expect(wire == f.envelope)
        #expect(wire.versionID == f.envelope.versionID)
        #expect(try f.open(wire) == f.payload)
    }

    @Test func everyFlippedByteOfNonceCiphertextOrSignatureIsCaught() throws {
        let f = try EnvelopeFixture()
        for i in f.envelope.ciphertext.indices {
            var e = f.envelope
            e.ciphertext[i] ^= 0x20
            #expect(throws: EnvelopeError.invalidSignature) { try f.open(e) }
        }
        for i in 0..<AEADNonce.byteCount {
            var e = f.envelope
            var n = e.nonce.bytes
            n[i] ^= 1
            e.nonce = try AEADNonce(bytes: n)
            #expect(throws: EnvelopeError.invalidSignature) { try f.open(e) }
        }
        for i in 0..<Signature.byteCount {
            var e = f.envelope
            var s = e.signature.bytes
            s[i] ^= 1
            e.signature = try Signature(bytes: s)
            #expect(throws: EnvelopeError.invalidSignature) { try f.open(e) }
        }
    }

    @Test func everyHeaderFieldIsBound() throws {
        let f = try EnvelopeFixture()
        let other = UUID()
        // Each edit a server could make to a visible field, and the specific error the reader reports.
        let cases: [(String, (inout RecordHeader) -> Void, EnvelopeError)] = [
            ("format version", { $0.formatVersion = 2 }, .unsupportedVersion(2)),
            ("epoch 0", { $0.epoch = 0 }, .malformed("epoch 0")),
            (
                "owner",
                {
                    $0.ownerID = other
                    $0.authorID = other
                }, .wrongContext(field: "owner")
            ),
            ("tresor", { $0.tresorID = other }, .wrongContext(field: "tresor")),
            ("category", { $0.category = "assessments" }, .wrongContext(field: "category")),
            ("author", { $0.authorID = other }, .authorNotOwner),
            ("epoch", { $0.epoch = 2 }, .invalidSignature),
            ("record type", { $0.recordType = .outcome }, .invalidSignature),
            ("record id", { $0.recordID = RecordID.make(type: .activity, activityID: "run", occurrence: nil, key: .generate()) }, .invalidSignature),
            (
                "timestamp", { $0.timestamp = HLCTimestamp(physicalMs: $0.timestamp.physicalMs + 1, counter: 3, deviceID: "device-a") },
                .invalidSignature
            ),
            ("counter", { $0.timestamp = HLCTimestamp(physicalMs: $0.timestamp.physicalMs, counter: 4, deviceID: "device-a") }, .invalidSignature),
            ("device", { $0.timestamp = HLCTimestamp(physicalMs: $0.timestamp.physicalMs, counter: 3, deviceID: "device-b") }, .invalidSignature),
            ("deleted flag", { $0.deleted = true }, .invalidSignature),
        ]
        for (name, edit, expected) in cases {
            var e = f.envelope
            edit(&e.header)
            #expect(throws: expected, "\(name)") { try f.open(e) }
        }
    }

    @Test func headerChangesAreCaughtByTheAEADEvenWithAValidSignature() throws {
        // Defence in depth: even an author-signed envelope whose header was changed after encryption
        // (a buggy or malicious device, or a leaked signing key) does not decrypt into garbage.
        let f = try EnvelopeFixture()
        for edit in [
            { (h: inout RecordHeader) in h.deleted = true }, { $0.timestamp = HLCTimestamp(physicalMs: 1, counter: 0, deviceID: "x") },
            { $0.recordType = .outcome },
        ] {
            var e = f.envelope
            edit(&e.header)
            e.signature = f.patient.signing.sign(e.signedBytes)
            #expect(throws: EnvelopeError.decryptionFailed) { try f.open(e) }
        }
    }

    @Test func swappedRecordsAreRejected() throws {
        // The server moves one record's ciphertext under another record's header.
        let f = try EnvelopeFixture()
        var h2 = f.header
        h2.recordID = RecordID.make(type: .activity, activityID: "stretch", occurrence: nil, key: f.patient.recordIDKey)
        let second = try Envelope.seal(payload: Array("other".utf8), header: h2, key: f.tresor.currentKey, author: f.patient.signing)
        var swapped = second
        swapped.nonce = f.envelope.nonce
        swapped.ciphertext = f.envelope.ciphertext
        #expect(throws: EnvelopeError.invalidSignature) { try f.open(swapped) }
        swapped.signature = f.envelope.signature
        #expect(throws: EnvelopeError.invalidSignature) { try f.open(swapped) }
    }

    @Test func openedAsAnotherOwnerCategoryOrEpochIsRejected() throws {
        let f = try EnvelopeFixture()
        #expect(throws: EnvelopeError.wrongContext(field: "owner")) { try f.open(f.envelope, context: EnvelopeContext(ownerID: UUID())) }
        #expect(throws: EnvelopeError.wrongContext(field: "category")) {
            try f.open(f.envelope, context: EnvelopeContext(ownerID: f.patient.userID, category: "assessments"))
        }
        #expect(throws: EnvelopeError.wrongContext(field: "tresor")) {
            try f.open(
                f.envelope,
                context: EnvelopeContext(ownerID: f.patient.userID, tresorID: Tresor.id(ownerID: f.patient.userID, category: "assessments"))
            )
        }
        // The reader has only a later epoch's key (a revoked doctor with new keys only, or the reverse).
        var rotated = f.tresor
        rotated.rotate()
        #expect(throws: EnvelopeError.missingEpochKey(1)) { try f.open(f.envelope, keys: [2: rotated.keys[2]!]) }
        // A key for epoch 1 that is not this tresor's epoch-1 key (another tresor's, or a substituted one).
        #expect(throws: EnvelopeError.decryptionFailed) { try f.open(f.envelope, keys: [1: .generate()]) }
        // Another author's key.
        #expect(throws: EnvelopeError.invalidSignature) {
            try f.envelope.open(keys: f.tresor.keys, authorKey: SigningKeyPair.generate().publicKey, expecting: f.context)
        }
    }

    @Test func paddingBucketsFollowPadme() throws {
        #expect(Envelope.bucket(forPayloadLength: 0) == 256)
        #expect(Envelope.bucket(forPayloadLength: 255) == 256)
        #expect(Envelope.bucket(forPayloadLength: 256) == 272)
        #expect(Envelope.bucket(forPayloadLength: 500) == 512)
        #expect(Envelope.bucket(forPayloadLength: 16_384) == 17_408)
        for n in stride(from: 0, to: 200_000, by: 997) {
            let b = Envelope.bucket(forPayloadLength: n)
            #expect(b > n && Envelope.padme(b) == b, "bucket \(b) for \(n)")
            #expect(Double(b) <= max(256, Double(n + 1) * 1.12), "overhead for \(n)")
        }
        let f = try EnvelopeFixture()
        for n in [0, 1, 300, 4_000, 16_384] {
            let payload = RandomBytes.bytes(count: n)
            let e = try Envelope.seal(payload: payload, header: f.header, key: f.tresor.currentKey, author: f.patient.signing)
            #expect(e.ciphertext.count == Envelope.bucket(forPayloadLength: n) + AEAD.tagByteCount)
            #expect(try f.open(e) == payload)
        }
    }

    @Test func nonCanonicalPaddingIsRejected() throws {
        // An author-signed envelope whose plaintext is not padded to a bucket: the reader refuses it.
        let f = try EnvelopeFixture()
        for padded in [
            try Padding.pad(Array("x".utf8), blockSize: 300), try Padding.pad(Array("x".utf8), blockSize: 512),
            [UInt8](repeating: 0, count: 256),
        ] {
            var e = f.envelope
            e.nonce = .random()
            e.ciphertext = AEAD.seal(padded, key: f.tresor.currentKey, nonce: e.nonce, associatedData: f.header.associatedData())
            e.signature = f.patient.signing.sign(e.signedBytes)
            #expect(throws: EnvelopeError.invalidPadding) { try f.open(e) }
        }
    }

    @Test func paddingWithTheBucketStepGivesTheWholeBucketPadding() throws {
        // The documented format is ISO/IEC 7816-4 padding to the whole bucket; the code pads with the
        // bucket's Padmé step as block size. The plaintext bytes must be the same, at every bucket edge.
        let f = try EnvelopeFixture()
        var lengths = Set([0, 1, 254, 255, 256, 479, 480, 1_000, 16_000, 16_383, 16_384, 70_000])
        var n = 256
        while n < 200_000 {
            let b = Envelope.bucket(forPayloadLength: n)
            lengths.formUnion([b - 2, b - 1, b, b + 1])
            n = b + 1
        }
        for length in lengths.sorted() {
            let payload = [UInt8](repeating: 0x41, count: length)
            let e = try Envelope.seal(payload: payload, header: f.header, key: f.tresor.currentKey, author: f.patient.signing)
            let plain = try AEAD.open(e.ciphertext, key: f.tresor.currentKey, nonce: e.nonce, associatedData: f.header.associatedData())
            let bucket = Envelope.bucket(forPayloadLength: length)
            #expect(plain == (try Padding.pad(payload, blockSize: bucket)), "payload of \(length) bytes")
            #expect(bucket % Envelope.paddingBlock(forBucket: bucket) == 0)
            #expect(try f.open(e) == payload)
        }
    }

    @Test func aMarkerBeforeTheLastStepIsRejected() throws {
        // 0x80 placed one byte before the bucket's last step: a well-formed 7816-4 padding of a 16 KiB
        // bucket, but of a payload that maps to a smaller bucket, so the reader must refuse it.
        let f = try EnvelopeFixture()
        let bucket = 16_384
        let step = Envelope.paddingBlock(forBucket: bucket)
        #expect(step == 1_024)
        let short = [UInt8](repeating: 0x41, count: bucket - step - 1)
        #expect(Envelope.bucket(forPayloadLength: short.count) < bucket)
        var e = f.envelope
        e.nonce = .random()
        e.ciphertext = AEAD.seal(
            try Padding.pad(short, blockSize: bucket),
            key: f.tresor.currentKey,
            nonce: e.nonce,
            associatedData: f.header.associatedData()
        )
        #expect(e.ciphertext.count == bucket + AEAD.tagByteCount)
        e.signature = f.patient.signing.sign(e.signedBytes)
        #expect(throws: EnvelopeError.invalidPadding) { try f.open(e) }
    }

    @Test func versionIdsAreStableAndUnique() throws {
        let f = try EnvelopeFixture()
        #expect(f.envelope.versionID == f.envelope.versionID)
        #expect(f.envelope.versionID.count == 64)
        let again = try Envelope.seal(payload: f.payload, header: f.header, key: f.tresor.currentKey, author: f.patient.signing)
        #expect(again.versionID != f.envelope.versionID, "fresh nonce, fresh version")
    }

    @Test func recordIdsAreStableKeyedAndDistinct() {
        let k = SymmetricKey.generate()
        #expect(
            RecordID.make(type: .activity, activityID: "walk", occurrence: nil, key: k)
                == RecordID.make(type: .activity, activityID: "walk", occurrence: nil, key: k)
        )
        #expect(
            RecordID.make(type: .activity, activityID: "walk", occurrence: nil, key: k)
                != RecordID.make(type: .activity, activityID: "walk", occurrence: nil, key: .generate())
        )
        #expect(
            RecordID.make(type: .outcome, activityID: "walk", occurrence: 1, key: k)
                != RecordID.make(type: .outcome, activityID: "walk", occurrence: 2, key: k)
        )
        #expect(
            RecordID.make(type: .outcome, activityID: "walk", occurrence: 0, key: k)
                != RecordID.make(type: .activity, activityID: "walk", occurrence: nil, key: k)
        )
    }
}

@Suite("Care records through the envelope")
struct CareRecordEnvelopeTests {
    @Test func openingWhatWasVerifiedEarlierStillCatchesTamperingAndSwaps() throws {
        // The doctor's cache reads without a second signature check: the AEAD must still refuse a changed
        // byte, a changed header field, a record moved to another id, and the wrong context.
        let f = try EnvelopeFixture()
        let start = Date(unixMillis: 1_767_000_000_000)
        let schedule = try Schedule.dailyAtTimes(
            start: start,
            end: nil,
            times: [DateComponents(hour: 8, minute: 0)],
            timeZone: TimeZone(identifier: "UTC")!
        )
        let walk = try Activity(id: "walk", title: "Walk", category: "interventions", schedule: schedule, createdAt: start)
        let env = try Envelope.seal(record: .activity(walk), type: .activity, header: f.header, key: f.tresor.currentKey, author: f.patient.signing)
        #expect(try env.openRecordVerifiedEarlier(keys: f.tresor.keys, expecting: f.context).record == .activity(walk))

        for i in [0, env.ciphertext.count / 2, env.ciphertext.count - 1] {
            var flipped = env
            flipped.ciphertext[i] ^= 0x01
            #expect(throws: EnvelopeError.decryptionFailed) { try flipped.openRecordVerifiedEarlier(keys: f.tresor.keys, expecting: f.context) }
        }
        var moved = env
        moved.header.recordID = RecordID.make(type: .activity, activityID: "other", occurrence: nil, key: f.patient.recordIDKey)
        #expect(throws: EnvelopeError.decryptionFailed) { try moved.openRecordVerifiedEarlier(keys: f.tresor.keys, expecting: f.context) }
        var flippedDelete = env
        flippedDelete.header.deleted = true
        #expect(throws: EnvelopeError.self) { try flippedDelete.openRecordVerifiedEarlier(keys: f.tresor.keys, expecting: f.context) }
        var otherNonce = env
        otherNonce.nonce = .random()
        #expect(throws: EnvelopeError.decryptionFailed) { try otherNonce.openRecordVerifiedEarlier(keys: f.tresor.keys, expecting: f.context) }

        let elsewhere = EnvelopeContext(ownerID: UUID(), tresorID: f.tresor.id, category: f.tresor.category)
        #expect(throws: EnvelopeError.wrongContext(field: "owner")) { try env.openRecordVerifiedEarlier(keys: f.tresor.keys, expecting: elsewhere) }
        let otherTresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        #expect(throws: EnvelopeError.decryptionFailed) { try env.openRecordVerifiedEarlier(keys: otherTresor.keys, expecting: f.context) }
    }

    @Test func activitiesOutcomesAndTombstonesRoundTrip() throws {
        let f = try EnvelopeFixture()
        let start = Date(unixMillis: 1_767_000_000_000)
        let schedule = try Schedule.dailyAtTimes(
            start: start,
            end: nil,
            times: [DateComponents(hour: 8, minute: 0)],
            timeZone: TimeZone(identifier: "Europe/Berlin")!
        )
        let walk = try Activity(id: "walk", title: "Walk 30 minutes", category: "interventions", schedule: schedule, createdAt: start)
        let env = try Envelope.seal(record: .activity(walk), type: .activity, header: f.header, key: f.tresor.currentKey, author: f.patient.signing)
        #expect(try env.openRecord(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey, expecting: f.context).record == .activity(walk))

        var outcomeHeader = f.header
        outcomeHeader.recordType = .outcome
        outcomeHeader.recordID = RecordID.make(type: .outcome, activityID: "walk", occurrence: 3, key: f.patient.recordIDKey)
        let outcome = Outcome(activityID: "walk", occurrence: 3, values: [OutcomeValue(value: .boolean(true), createdAt: start)], createdAt: start)
        let oenv = try Envelope.seal(
            record: .outcome(outcome),
            type: .outcome,
            header: outcomeHeader,
            key: f.tresor.currentKey,
            author: f.patient.signing
        )
        #expect(try oenv.openRecord(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey, expecting: f.context).record == .outcome(outcome))

        var deadHeader = f.header
        deadHeader.deleted = true
        let tomb = try Envelope.seal(record: nil, type: .activity, header: deadHeader, key: f.tresor.currentKey, author: f.patient.signing)
        let opened = try tomb.openRecord(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey, expecting: f.context)
        #expect(opened.record == nil && opened.header.deleted)
        // The sealing side refuses a header that contradicts the record.
        #expect(throws: EnvelopeError.self) {
            try Envelope.seal(record: .activity(walk), type: .activity, header: deadHeader, key: f.tresor.currentKey, author: f.patient.signing)
        }
    }

    @Test func payloadContradictingItsHeaderIsRejected() throws {
        // An author-signed envelope whose (encrypted) payload disagrees with its header: a buggy or
        // malicious device must not get a record into another category or resurrect a tombstone.
        let f = try EnvelopeFixture()
        let start = Date(unixMillis: 1_767_000_000_000)
        let schedule = try Schedule.allDay(start: start, end: nil, timeZone: TimeZone(identifier: "UTC")!)
        let other = try Activity(id: "walk", title: "Walk", category: "assessments", schedule: schedule, createdAt: start)
        let cases: [(RecordHeader, String, EnvelopeError)] = [
            (f.header, #"{"type":"outcome"}"#, .payloadMismatch("record type")),
            (f.header, #"{"type":"activity"}"#, .payloadMismatch("live record without a body")),
            (
                {
                    var h = f.header
                    h.deleted = true
                    return h
                }(), String(decoding: try RecordPayload.encoder.encode(RecordPayload(type: .activity, activity: other)), as: UTF8.self),
                .payloadMismatch("tombstone with a body")
            ),
            (
                f.header, String(decoding: try RecordPayload.encoder.encode(RecordPayload(type: .activity, activity: other)), as: UTF8.self),
                .payloadMismatch("category")
            ),
            (f.header, "not json", .malformedPayload("not a record: DecodingError")),
        ]
        for (header, json, expected) in cases {
            let env = try Envelope.seal(payload: Array(json.utf8), header: header, key: f.tresor.currentKey, author: f.patient.signing)
            #expect(throws: expected, "\(json)") {
                try env.openRecord(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey, expecting: f.context)
            }
        }
    }
}
