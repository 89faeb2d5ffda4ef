import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Schedule expansion for any decoded schedule: bytes 0-7 are an occurrence index, 8-15 and 16-23 the
/// query range (seconds since 1970 as IEEE doubles, NaN and infinities included), the rest the
/// schedule's JSON. Expansion must answer or throw, and agree with the direct occurrence lookup.
let scheduleCoder: (JSONEncoder, JSONDecoder) = {
    let e = JSONEncoder()
    e.dateEncodingStrategy = .millisecondsSince1970
    let d = JSONDecoder()
    d.dateDecodingStrategy = .millisecondsSince1970
    return (e, d)
}()

func word(_ bytes: [UInt8], _ at: Int) -> UInt64 {
    (0..<8).reduce(UInt64(0)) { $0 << 8 | UInt64(at + $1 < bytes.count ? bytes[at + $1] : 0) }
}

func bigEndian(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) } }

func seeds() -> [[UInt8]] {
    let schedule = Array(try! scheduleCoder.0.encode(FuzzFixture.sampleActivity().schedule))
    let from = FuzzFixture.start.timeIntervalSince1970
    return [
        bigEndian(5) + bigEndian(from.bitPattern) + bigEndian((from + 30 * 86_400).bitPattern) + schedule,
        bigEndian(UInt64(Int.max)) + bigEndian((-62_135_596_800.0).bitPattern) + bigEndian(64_092_211_200.0.bitPattern) + schedule,
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
        guard bytes.count > 24, let schedule = try? scheduleCoder.1.decode(Schedule.self, from: Data(bytes[24...])) else { return }
        let occurrence = Int(truncatingIfNeeded: word(bytes, 0))
        let from = Date(timeIntervalSince1970: Double(bitPattern: word(bytes, 8)))
        let to = Date(timeIntervalSince1970: Double(bitPattern: word(bytes, 16)))
        _ = schedule.event(occurrence: occurrence)
        guard let events = try? schedule.events(from: from, to: to) else { return }
        // The same event has the same index whatever range was asked for.
        for event in [events.first, events.last].compactMap({ $0 }) {
            precondition(schedule.event(occurrence: event.occurrence)?.start == event.start, "an occurrence index moved")
        }
    }
}
