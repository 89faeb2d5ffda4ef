import Foundation
import Testing

@testable import VaultCore

@Suite("Hybrid logical clock")
struct HybridLogicalClockTests {
    private let hour: UInt64 = 3_600_000

    @Test func ticksStayStrictlyIncreasingWhenTheWallClockJumpsBack() throws {
        // Given a clock whose wall time runs, jumps back an hour, stalls, then runs again
        var clock = HybridLogicalClock(deviceID: "phone")
        var wall: UInt64 = 1_700_000_000_000
        var previous = try clock.tick(wallClockMs: wall)
        for step in 0..<5_000 {
            switch step {
            case 1_000: wall -= hour  // NTP correction backwards
            case 2_000..<3_000: break  // frozen clock
            case 3_500: wall -= 10 * hour  // a manual change far back
            default: wall += UInt64(step % 3)  // 0-2 ms per event: many share a millisecond
            }
            // When it ticks
            let next = try clock.tick(wallClockMs: wall)
            // Then every timestamp is above the last, and never behind the wall clock
            #expect(next > previous)
            #expect(next.physicalMs >= wall)
            previous = next
        }
        #expect(clock.last == previous)
    }

    @Test func counterRestartsWhenTheWallClockMovesOn() throws {
        var clock = HybridLogicalClock(deviceID: "phone")
        #expect(try clock.tick(wallClockMs: 100) == HLCTimestamp(physicalMs: 100, counter: 0, deviceID: "phone"))
        #expect(try clock.tick(wallClockMs: 100) == HLCTimestamp(physicalMs: 100, counter: 1, deviceID: "phone"))
        #expect(try clock.tick(wallClockMs: 90) == HLCTimestamp(physicalMs: 100, counter: 2, deviceID: "phone"))
        #expect(try clock.tick(wallClockMs: 101) == HLCTimestamp(physicalMs: 101, counter: 0, deviceID: "phone"))
    }

    @Test func receiveFromARemoteAheadWithinTheBoundAdvances() throws {
        // Given a local clock at wall time T and a remote one minute ahead
        let wall: UInt64 = 1_700_000_000_000
        var clock = HybridLogicalClock(deviceID: "phone")
        _ = try clock.tick(wallClockMs: wall)
        let remote = HLCTimestamp(physicalMs: wall + 60_000, counter: 7, deviceID: "tablet")
        // When it is received
        let received = try clock.receive(remote, wallClockMs: wall + 5)
        // Then the clock adopts the remote time with the next counter
        #expect(received == HLCTimestamp(physicalMs: wall + 60_000, counter: 8, deviceID: "phone"))
        #expect(received > remote)
        // And later local ticks stay above it although the wall clock is still behind
        var previous = received
        for i in 0..<100 {
            let t = try clock.tick(wallClockMs: wall + 10 + UInt64(i))
            #expect(t > previous && t > remote)
            previous = t
        }
        // And once the wall clock passes it, the counter restarts
        #expect(try clock.tick(wallClockMs: wall + 120_000) == HLCTimestamp(physicalMs: wall + 120_000, counter: 0, deviceID: "phone"))
    }

    @Test func receiveUsesTheLargerCounterWhenAllAgree() throws {
        var clock = HybridLogicalClock(deviceID: "b", lastPhysicalMs: 500, lastCounter: 3)
        #expect(try clock.receive(HLCTimestamp(physicalMs: 500, counter: 9, deviceID: "a"), wallClockMs: 400).counter == 10)
        #expect(try clock.receive(HLCTimestamp(physicalMs: 200, counter: 99, deviceID: "a"), wallClockMs: 400).counter == 11)
        #expect(
            try clock.receive(HLCTimestamp(physicalMs: 200, counter: 99, deviceID: "a"), wallClockMs: 600)
                == HLCTimestamp(physicalMs: 600, counter: 0, deviceID: "b")
        )
    }

    @Test func forwardDriftBoundAcceptsTwoHoursAndRefusesBeyondThree() throws {
        // Given a clock that tolerates 3 hours of forward drift
        let wall: UInt64 = 1_700_000_000_000
        var clock = HybridLogicalClock(deviceID: "phone", maxForwardDriftMs: 3 * hour)
        _ = try clock.tick(wallClockMs: wall)
        // When a remote 2 hours ahead arrives, it is accepted
        let ok = try clock.receive(HLCTimestamp(physicalMs: wall + 2 * hour, counter: 0, deviceID: "tablet"), wallClockMs: wall)
        #expect(ok.physicalMs == wall + 2 * hour)
        // Exactly at the bound is still accepted
        _ = try clock.receive(HLCTimestamp(physicalMs: wall + 3 * hour, counter: 0, deviceID: "tablet"), wallClockMs: wall)
        // When one a millisecond beyond the bound arrives, it is refused and nothing changes
        let before = clock
        let tooFar = HLCTimestamp(physicalMs: wall + 3 * hour + 1, counter: 0, deviceID: "tablet")
        #expect(throws: HLCError.remoteTooFarAhead(remoteMs: wall + 3 * hour + 1, wallClockMs: wall, limitMs: 3 * hour)) {
            try clock.receive(tooFar, wallClockMs: wall)
        }
        #expect(clock == before)
        // The server applies the same rule with its own clock
        #expect(throws: HLCError.self) { try HybridLogicalClock.validate(remote: tooFar, serverNowMs: wall, maxForwardDriftMs: 3 * hour) }
        try HybridLogicalClock.validate(remote: tooFar, serverNowMs: wall + 1, maxForwardDriftMs: 3 * hour)
        try HybridLogicalClock.validate(remote: tooFar, serverNowMs: .max, maxForwardDriftMs: .max)
        #expect(HybridLogicalClock(deviceID: "x").maxForwardDriftMs == 5 * 60 * 1000)
    }

    @Test func counterOverflowThrowsAndLeavesStateUnchanged() throws {
        var clock = HybridLogicalClock(deviceID: "phone", lastPhysicalMs: 1_000, lastCounter: .max)
        let before = clock
        #expect(throws: HLCError.counterOverflow) { try clock.tick(wallClockMs: 1_000) }
        #expect(throws: HLCError.counterOverflow) {
            try clock.receive(HLCTimestamp(physicalMs: 1_000, counter: 5, deviceID: "tablet"), wallClockMs: 900)
        }
        // A peer whose counter is at the limit, ahead of both this clock and the wall clock.
        #expect(throws: HLCError.counterOverflow) {
            try clock.receive(HLCTimestamp(physicalMs: 1_002, counter: .max, deviceID: "tablet"), wallClockMs: 1_001)
        }
        #expect(clock == before)
        // A wall clock that moves on resolves it.
        #expect(try clock.tick(wallClockMs: 1_001).counter == 0)
    }

    @Test func orderingBreaksTiesByDeviceID() {
        let a = HLCTimestamp(physicalMs: 10, counter: 2, deviceID: "device-a")
        let b = HLCTimestamp(physicalMs: 10, counter: 2, deviceID: "device-b")
        #expect(a < b && !(b < a) && a != b)
        #expect(HLCTimestamp(physicalMs: 10, counter: 3, deviceID: "device-a") > b, "counter before device id")
        #expect(HLCTimestamp(physicalMs: 11, counter: 0, deviceID: "a") > HLCTimestamp(physicalMs: 10, counter: 9, deviceID: "z"))
        let shuffled = [b, a, HLCTimestamp(physicalMs: 9, counter: 99, deviceID: "z")].sorted()
        #expect(shuffled.map(\.deviceID) == ["z", "device-a", "device-b"])
        #expect(a.description == "10.2@device-a")
    }

    @Test func stateCodableRoundTrip() throws {
        var clock = HybridLogicalClock(deviceID: "phone", maxForwardDriftMs: 3 * hour)
        _ = try clock.tick(wallClockMs: 1_700_000_000_000)
        _ = try clock.tick(wallClockMs: 1_700_000_000_000)
        let data = try JSONEncoder().encode(clock)
        var restored = try JSONDecoder().decode(HybridLogicalClock.self, from: data)
        #expect(restored == clock)
        // The restored clock continues strictly above the saved one.
        #expect(try restored.tick(wallClockMs: 0) > clock.last)
        // A state saved before the drift field existed decodes with the default.
        let old = #"{"deviceID":"phone","lastPhysicalMs":5,"lastCounter":1}"#
        #expect(
            try JSONDecoder().decode(HybridLogicalClock.self, from: Data(old.utf8)).maxForwardDriftMs == HybridLogicalClock.defaultMaxForwardDriftMs
        )
        let ts = HLCTimestamp(physicalMs: .max, counter: .max, deviceID: "d")
        #expect(try JSONDecoder().decode(HLCTimestamp.self, from: JSONEncoder().encode(ts)) == ts)
    }
}
