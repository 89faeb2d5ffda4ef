import Testing
import VaultCrypto

@testable import VaultCore

@Suite("Canonical encoding")
struct CanonicalEncodingTests {
    @Test func roundTripAndExactBytes() throws {
        var w = CanonicalWriter(domain: "T")
        w.append(UInt8(7))
        w.append(UInt32(1))
        w.append(UInt64(2))
        w.append(true)
        w.append("hé")
        w.append(nil as String?)
        w.append(Int64(-1) as Int64?)
        #expect(
            w.bytes == [
                0, 0, 0, 1, 0x54, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 3, 0x68, 0xc3, 0xa9, 0, 1,
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ]
        )
        var r = try CanonicalReader(w.bytes, domain: "T")
        #expect(try r.readUInt8() == 7)
        #expect(try r.readUInt32() == 1)
        #expect(try r.readUInt64() == 2)
        #expect(try r.readBool())
        #expect(try r.readString() == "hé")
        #expect(try r.readOptionalString() == nil)
        #expect(try r.readOptionalInt64() == -1)
        try r.finish()
    }

    @Test func rejectsWrongDomainTruncationTrailingBytesAndBadValues() throws {
        var w = CanonicalWriter(domain: "A")
        w.append("x")
        #expect(throws: EncodingError.wrongDomain(expected: "B", found: "A")) { try CanonicalReader(w.bytes, domain: "B") }
        var r = try CanonicalReader(Array(w.bytes.dropLast()), domain: "A")
        #expect(throws: EncodingError.truncated) { try r.readString() }
        var r2 = try CanonicalReader(w.bytes + [0], domain: "A")
        _ = try r2.readString()
        #expect(throws: EncodingError.trailingBytes(1)) { try r2.finish() }
        var w3 = CanonicalWriter(domain: "A")
        w3.append(UInt8(2))
        var r3 = try CanonicalReader(w3.bytes, domain: "A")
        #expect(throws: EncodingError.invalidValue("boolean")) { try r3.readBool() }
        var w4 = CanonicalWriter(domain: "A")
        w4.append([0xff, 0xfe] as [UInt8])
        var r4 = try CanonicalReader(w4.bytes, domain: "A")
        #expect(throws: EncodingError.invalidValue("UTF-8 string")) { try r4.readString() }
        // A length prefix larger than what follows must not read out of bounds.
        var r5 = try CanonicalReader(CanonicalWriter(domain: "A").bytes + [0xff, 0xff, 0xff, 0xff, 1], domain: "A")
        #expect(throws: EncodingError.truncated) { try r5.readBytes() }
    }

    @Test func fieldBoundariesCannotBeShifted() {
        // ("ab","c") and ("a","bc") must encode differently: that is what the length prefixes are for.
        var a = CanonicalWriter(domain: "D")
        a.append("ab")
        a.append("c")
        var b = CanonicalWriter(domain: "D")
        b.append("a")
        b.append("bc")
        #expect(a.bytes != b.bytes)
    }
}
