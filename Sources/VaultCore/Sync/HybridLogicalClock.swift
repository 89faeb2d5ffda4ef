import Foundation

/// A hybrid logical clock timestamp (Kulkarni et al., "Logical Physical Clocks", 2014): wall time in
/// milliseconds, a counter that orders events within one millisecond or while a device's clock lags, and
/// the device id. The order (physicalMs, counter, deviceID) is total and the same on every device and on
/// the server, which is what makes last-writer-wins deterministic.
public struct HLCTimestamp: Codable, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The physical component: milliseconds since 1970, never behind any timestamp this device has seen.
    public var physicalMs: UInt64
    /// The logical component: orders events that share `physicalMs`.
    public var counter: UInt32
    /// The device that issued the timestamp; the final tie-break, so two devices never produce equal timestamps.
    public var deviceID: String

    /// A timestamp from its parts.
    public init(physicalMs: UInt64, counter: UInt32, deviceID: String) {
        self.physicalMs = physicalMs
        self.counter = counter
        self.deviceID = deviceID
    }

    /// Orders by physical time, then counter, then device id as UTF-8 bytes (Docs/envelope-v1.md §6).
    public static func < (a: HLCTimestamp, b: HLCTimestamp) -> Bool {
        if a.physicalMs != b.physicalMs { return a.physicalMs < b.physicalMs }
        if a.counter != b.counter { return a.counter < b.counter }
        return deviceIDPrecedes(a.deviceID, b.deviceID)
    }

    /// Equal when all three parts are, the device id byte for byte: Swift's `==` on strings would call
    /// two spellings of one accented letter equal, which the bytes signed in the envelope are not.
    public static func == (a: HLCTimestamp, b: HLCTimestamp) -> Bool {
        a.physicalMs == b.physicalMs && a.counter == b.counter && a.deviceID.utf8.elementsEqual(b.deviceID.utf8)
    }

    /// The device-id order of every comparison of versions (Docs/envelope-v1.md §6): lexicographic over
    /// the UTF-8 bytes, as any other client and any database's binary collation orders them. Swift's `<`
    /// on strings orders by canonically normalised Unicode scalars instead, which differs for ids whose
    /// bytes are not in normal form (`"e\u{301}"` against `"\u{e9}"`).
    public static func deviceIDPrecedes(_ a: String, _ b: String) -> Bool {
        a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    /// `physicalMs.counter@deviceID`, e.g. `1700000000000.3@device-a`: readable in logs, sorts by eye.
    public var description: String { "\(physicalMs).\(counter)@\(deviceID)" }
}

/// Why the clock refused to issue or accept a timestamp.
public enum HLCError: Error, Equatable, Sendable {
    /// A remote timestamp's physical time is more than `limitMs` (the allowed forward drift) ahead of the
    /// local wall clock `wallClockMs`. Accepting it would drag every later local timestamp into the future.
    case remoteTooFarAhead(remoteMs: UInt64, wallClockMs: UInt64, limitMs: UInt64)
    /// The counter would pass `UInt32.max` within one millisecond: a runaway peer or a stuck clock.
    case counterOverflow
}

/// A device's hybrid logical clock. This value is the whole persisted state: save it after every tick or
/// receive (e.g. in the same transaction as the change it stamped), so timestamps stay monotonic across
/// restarts. Methods that throw leave the state unchanged.
public struct HybridLogicalClock: Sendable, Codable, Hashable {
    /// The default forward-drift bound: 5 minutes.
    public static let defaultMaxForwardDriftMs: UInt64 = 5 * 60 * 1000

    /// The physical component of the last timestamp issued or received.
    public private(set) var lastPhysicalMs: UInt64
    /// The counter of the last timestamp issued or received.
    public private(set) var lastCounter: UInt32
    /// This device's id, stamped into every timestamp.
    public let deviceID: String
    /// How far ahead of the local wall clock a remote timestamp may be before `receive` refuses it.
    public var maxForwardDriftMs: UInt64

    /// A clock for `deviceID`. Pass the saved `lastPhysicalMs`/`lastCounter` to resume a persisted clock
    /// (or decode the saved JSON).
    public init(
        deviceID: String,
        maxForwardDriftMs: UInt64 = HybridLogicalClock.defaultMaxForwardDriftMs,
        lastPhysicalMs: UInt64 = 0,
        lastCounter: UInt32 = 0
    ) {
        self.deviceID = deviceID
        self.maxForwardDriftMs = maxForwardDriftMs
        self.lastPhysicalMs = lastPhysicalMs
        self.lastCounter = lastCounter
    }

    /// The last timestamp issued or received (adopted under this device's id).
    public var last: HLCTimestamp { HLCTimestamp(physicalMs: lastPhysicalMs, counter: lastCounter, deviceID: deviceID) }

    /// A timestamp for a local event or a send: l' = max(l, wall); the counter restarts at 0 when the wall
    /// clock moved the physical part forward and counts up otherwise. Strictly greater than every
    /// timestamp this clock issued or received, even when the wall clock jumped backwards.
    public mutating func tick(wallClockMs: UInt64) throws(HLCError) -> HLCTimestamp {
        let l = max(lastPhysicalMs, wallClockMs)
        return try advance(to: l, countingPast: l == lastPhysicalMs ? lastCounter : nil)
    }

    /// Takes in a timestamp pulled from elsewhere and returns the local timestamp of that receive event:
    /// l' = max(l, remote.l, wall); the counter is one past the largest counter among the components
    /// that reached l' (0 when only the wall clock did). Refuses a remote too far ahead of the wall clock
    /// (`remoteTooFarAhead`) or a counter overflow; the state is then unchanged.
    public mutating func receive(_ remote: HLCTimestamp, wallClockMs: UInt64) throws(HLCError) -> HLCTimestamp {
        try HybridLogicalClock.validate(remote: remote, serverNowMs: wallClockMs, maxForwardDriftMs: maxForwardDriftMs)
        let l = max(lastPhysicalMs, remote.physicalMs, wallClockMs)
        let base: UInt32?
        switch (l == lastPhysicalMs, l == remote.physicalMs) {
        case (true, true): base = max(lastCounter, remote.counter)
        case (true, false): base = lastCounter
        case (false, true): base = remote.counter
        case (false, false): base = nil
        }
        return try advance(to: l, countingPast: base)
    }

    /// Moves the clock to physical time `l` with the counter one past `base`, or 0 when no component that
    /// reached `l` had a counter. Refuses to pass `UInt32.max` before changing anything.
    private mutating func advance(to l: UInt64, countingPast base: UInt32?) throws(HLCError) -> HLCTimestamp {
        if let base, base == .max { throw .counterOverflow }
        lastPhysicalMs = l
        lastCounter = base.map { $0 + 1 } ?? 0
        return last
    }

    /// The forward-drift rule on its own, for the server (against its own clock) and for clients before
    /// they apply a pulled page: throws `remoteTooFarAhead` when
    /// `remote.physicalMs > serverNowMs + maxForwardDriftMs` (the sum saturates rather than wraps).
    public static func validate(remote: HLCTimestamp, serverNowMs: UInt64, maxForwardDriftMs: UInt64) throws(HLCError) {
        let (sum, overflow) = serverNowMs.addingReportingOverflow(maxForwardDriftMs)
        let limit = overflow ? UInt64.max : sum
        guard remote.physicalMs <= limit else {
            throw .remoteTooFarAhead(remoteMs: remote.physicalMs, wallClockMs: serverNowMs, limitMs: maxForwardDriftMs)
        }
    }

    private enum CodingKeys: String, CodingKey { case lastPhysicalMs, lastCounter, deviceID, maxForwardDriftMs }

    /// Decodes saved state; a state saved without `maxForwardDriftMs` gets the default.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        deviceID = try c.decode(String.self, forKey: .deviceID)
        lastPhysicalMs = try c.decode(UInt64.self, forKey: .lastPhysicalMs)
        lastCounter = try c.decode(UInt32.self, forKey: .lastCounter)
        maxForwardDriftMs = try c.decodeIfPresent(UInt64.self, forKey: .maxForwardDriftMs) ?? Self.defaultMaxForwardDriftMs
    }

    /// Encodes the full state.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(lastPhysicalMs, forKey: .lastPhysicalMs)
        try c.encode(lastCounter, forKey: .lastCounter)
        try c.encode(deviceID, forKey: .deviceID)
        try c.encode(maxForwardDriftMs, forKey: .maxForwardDriftMs)
    }
}
