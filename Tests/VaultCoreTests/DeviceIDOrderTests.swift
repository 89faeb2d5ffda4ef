import Foundation
import Testing

@testable import VaultCore

/// Device ids order versions by their UTF-8 bytes (Docs/envelope-v1.md §6), the order any other client
/// and any database's binary collation gives, not by Swift's normalised string order.
@Suite("Device id order")
struct DeviceIDOrderTests {
    // "e" + combining acute + "z" (65 cc 81 7a) against "é" precomposed (c3 a9): by bytes the first
    // is smaller; normalised, it reads "éz", which Swift's string order puts after "é".
    static let decomposed = "e\u{301}z"
    static let precomposed = "\u{e9}"

    @Test func timestampsCompareDeviceIDsByteByByte() {
        #expect(Self.precomposed < Self.decomposed, "Swift's string order differs here, which is why the bytes decide")
        let a = HLCTimestamp(physicalMs: 5, counter: 1, deviceID: Self.decomposed)
        let b = HLCTimestamp(physicalMs: 5, counter: 1, deviceID: Self.precomposed)
        #expect(a < b && !(b < a) && a != b)
        #expect([b, a].sorted().map(\.deviceID) == [Self.decomposed, Self.precomposed])
        // Two spellings of one letter are equal strings to Swift, but different device ids.
        let nfd = HLCTimestamp(physicalMs: 5, counter: 1, deviceID: "e\u{301}")
        let nfc = HLCTimestamp(physicalMs: 5, counter: 1, deviceID: "\u{e9}")
        #expect("e\u{301}" == "\u{e9}")
        #expect(nfd != nfc && nfd < nfc)
        #expect(HLCTimestamp.deviceIDPrecedes("dev-a", "dev-b") && !HLCTimestamp.deviceIDPrecedes("dev-b", "dev-b"))
    }

    @Test func lastWriterWinsPicksTheByteGreaterDevice() {
        let small = Versioned(timestamp: HLCTimestamp(physicalMs: 9, counter: 0, deviceID: Self.decomposed), payload: "small")
        let large = Versioned(timestamp: HLCTimestamp(physicalMs: 9, counter: 0, deviceID: Self.precomposed), payload: "large")
        #expect(Reconciliation.winner(small, large).payload == "large")
        #expect(Reconciliation.winner(large, small).payload == "large")
        let local = LocalCopy(timestamp: large.timestamp, deleted: false, pending: true)
        let remote = Versioned<Outcome>(timestamp: small.timestamp, deleted: false, payload: nil)
        #expect(Reconciliation.resolve(local: local, remote: remote) == .keepLocal)
    }
}
