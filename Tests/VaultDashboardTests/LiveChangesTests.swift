import Foundation
import Testing

@testable import VaultDashboard

/// Live reloads: a burst of changes makes every open page reload once now and once when the interval
/// ends, not once per change.
@Suite("Dashboard: live changes")
struct LiveChangesTests {
    @Test func aBurstOfChangesIsToldOnceNowAndOnceAfterTheInterval() async throws {
        let live = LiveChanges(interval: .milliseconds(300))
        let (_, stream) = await live.subscribe()
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<10 { await live.changed() }
        var iterator = stream.makeAsyncIterator()
        #expect(await iterator.next() == 1)
        #expect(await iterator.next() == 2)
        #expect(clock.now - start >= .milliseconds(250))
        // Nothing more was queued: the next change after a quiet interval is told at once.
        try await Task.sleep(for: .milliseconds(350))
        await live.changed()
        #expect(await iterator.next() == 3)
    }
}
