import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// What Docs/envelope-v1.md and Docs/payload-v1.md state for an independent client, computed by the code
/// and found in the docs: the tresor and record id vectors, the derived value id, and the dates of the
/// schedule examples.
@Suite("Spec documents")
struct SpecDocTests {
    static let tresorID = "5e33abd4-57b7-8418-a999-da77bd6df0c7"
    static let recordID = "c0e2f8974222231f96afaf5893b21a5b3d92a36cddce8d82562cb2077d9c657c"
    static let valueID = "h-b89e1d40856d68c3869a67ca829bd43a"

    @Test func tresorAndRecordIDVectors() throws {
        #expect(SpecVectors.tresorID.uuidString.lowercased() == Self.tresorID)
        #expect(SpecVectors.recordID.hex == Self.recordID)
        // The derivation step by step, as §5.1 spells it.
        var w = CanonicalWriter(domain: "CareVault-tresor-id-v1")
        w.append(SpecVectors.owner)
        w.append(SpecVectors.category)
        var h = try BLAKE2b.hash(w.bytes, outputLength: 16)
        h[6] = (h[6] & 0x0f) | 0x80
        h[8] = (h[8] & 0x3f) | 0x80
        #expect(Hex.encode(h) == Self.tresorID.replacingOccurrences(of: "-", with: ""))
        let doc = try SpecVectors.doc("envelope-v1.md")
        #expect(doc.contains(Self.tresorID) && doc.contains(Self.recordID))
    }

    @Test func derivedValueIDVector() throws {
        let id = OutcomeValue.derivedID(value: .boolean(true), units: nil, kind: nil, createdAt: Date(unixMillis: 1_700_000_000_000))
        #expect(id == Self.valueID)
        #expect(try SpecVectors.doc("payload-v1.md").contains(Self.valueID))
    }

    @Test func theReferenceWriterWritesTheVectorPayloadByteForByte() throws {
        let value = OutcomeValue(id: "v1", value: .boolean(true), createdAt: Date(unixMillis: 1_700_000_000_000))
        let outcome = Outcome(activityID: "walk", occurrence: 3, values: [value], createdAt: Date(unixMillis: 1_700_000_000_000))
        let written = try RecordPayload.encoder.encode(RecordPayload(type: .outcome, outcome: outcome))
        #expect(Array(written) == SpecVectors.outcomePayload, "sorted keys, whole milliseconds as integers")
    }

    /// Docs/envelope-v1.md §3: the registration statement an outsider signs, byte for byte, and its signature.
    @Test func registrationStatementIsTheDocumentedVector() throws {
        let signing = try SigningKeyPair(seed: SecureBytes(copying: Array(UInt8(0x40)...UInt8(0x5f))))
        let user = try #require(UUID(uuidString: "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0"))
        let kdf = try KDFParameters(opsLimit: 3, memLimitBytes: 268_435_456)
        let salt = try Salt(bytes: Array(UInt8(0x00)...UInt8(0x0f)))
        let nonce = try AEADNonce(bytes: Array(UInt8(0xe0)...UInt8(0xf7)))
        let request = RegistrationRequest(
            userID: user,
            username: "pat",
            role: .patient,
            signingKey: signing.publicKey,
            boxKey: try BoxPublicKey(bytes: Array(UInt8(0xa0)...UInt8(0xbf))),
            kdf: kdf,
            salt: salt,
            loginVerifier: Base64URL.encode(Array(UInt8(0xc0)...UInt8(0xdf))),
            keyBundle: KeyBundle(userID: user, kdf: kdf, salt: salt, nonce: nonce, ciphertext: "Y2lwaGVydGV4dA"),
            requestedAt: 1_767_225_600_000,
            signature: .unsigned
        )
        .signed(by: signing)
        try request.verify()
        let doc = try SpecVectors.doc("envelope-v1.md")
        #expect(Hex.encode(request.statementBytes) == SpecVectors.hexBlock(after: "Vector (registration)", in: doc))
        #expect(request.statementBytes.count == 311 && doc.contains("The statement (311 bytes)"))
        #expect(doc.contains(Hex.encode(signing.publicKey.bytes)) && doc.contains(request.loginVerifier))
        #expect(doc.contains("and its signature `\(request.signature.base64URL)`"))
    }

    @Test func sectionsAreInOrder() throws {
        let doc = try SpecVectors.doc("envelope-v1.md")
        let headings = doc.split(separator: "\n").filter { $0.hasPrefix("## ") }.compactMap { Int($0.dropFirst(3).prefix { $0.isNumber }) }
        #expect(headings == Array(1...headings.count) && headings.count >= 8)
    }

    /// The occurrences of each schedule example of Docs/payload-v1.md §6, as the doc lists them.
    @Test func scheduleExamplesGiveTheDatesTheDocLists() throws {
        let berlin = TimeZone(identifier: "Europe/Berlin")!
        let utc = TimeZone(identifier: "UTC")!
        func at(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }
        func time(_ h: Int) -> DateComponents { DateComponents(hour: h, minute: 0) }
        let examples: [(String, Schedule, TimeZone, Int)] = [
            ("A", try .dailyAtTimes(start: at("2024-03-30T00:00:00+01:00"), times: [time(8), time(20)], timeZone: berlin), berlin, 4),
            (
                "B",
                Schedule(elements: [
                    try ScheduleElement(start: at("2024-03-30T22:00:00+01:00"), interval: .hours(8), timeZoneIdentifier: "Europe/Berlin")
                ]), berlin, 3
            ),
            ("C", try .weekly(start: at("2024-01-01T00:00:00Z"), weekdays: [5, 2], at: time(9), timeZone: utc), utc, 4),
            ("D", try .allDay(start: at("2024-03-30T15:00:00+01:00"), timeZone: berlin), berlin, 2),
            ("E", try .everyNDays(2, start: at("2024-01-01T00:00:00Z"), end: at("2024-01-06T00:00:00Z"), at: time(9), timeZone: utc), utc, 4),
        ]
        let doc = try SpecVectors.doc("payload-v1.md")
        for (name, schedule, zone, count) in examples {
            let f = ISO8601DateFormatter()
            f.timeZone = zone
            let events = (0..<count).map { schedule.event(occurrence: $0) }
            let line =
                "Example \(name): "
                + events.enumerated().map { k, e in e.map { "\(k) → \(f.string(from: $0.start))" } ?? "\(k) → none" }.joined(separator: ", ")
            #expect(doc.contains(line), "\(line)")
            // The range query agrees with the index lookup.
            let found = try schedule.events(from: at("2023-12-01T00:00:00Z"), to: at("2024-05-01T00:00:00Z")).prefix(count)
            #expect(found.map(\.start) == events.compactMap { $0?.start })
        }
    }
}
