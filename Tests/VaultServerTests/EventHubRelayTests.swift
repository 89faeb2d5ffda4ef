import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import VaultServer

/// The hub publishes through the PostgreSQL relay's closure. Kept straight in a generic locked box, that
/// closure was re-abstracted on every access: each publication wrapped it in one more pair of thunks, so
/// the n-th publication walked 2n frames. The clinic's growth probe found the instances spending more time
/// on it the more had been pushed; enough publications would overflow a thread's stack.
@Suite("Events: a publication through the relay costs the same after a hundred thousand")
struct EventHubRelayTests {
    /// A hundred thousand publications on a thread with a 256 KiB stack: with the chain, the last ones would
    /// need 200,000 frames, far past the stack (the test process would crash); each is a few frames now.
    /// The test awaits the thread's end (or two minutes) without blocking a thread of the cooperative pool.
    @Test func aHundredThousandPublicationsRunOnASmallStack() async throws {
        let hub = EventHub()
        let delivered = NIOLockedValueBox(0)
        hub.setRelay { _ in delivered.withLockedValue { $0 += 1 } }
        let notice = EventNotice.account(UUID())
        // The first value wins: true from the thread when it is done, false from the timer.
        let (ends, end) = AsyncStream.makeStream(of: Bool.self)
        let thread = Thread {
            for _ in 0..<100_000 { hub.publish(notice) }
            end.yield(true)
            end.finish()
        }
        thread.stackSize = 256 << 10
        thread.start()
        let timer = Task {
            guard (try? await Task.sleep(for: .seconds(120))) != nil else { return }
            end.yield(false)
            end.finish()
        }
        var first = ends.makeAsyncIterator()
        let finished = await first.next() ?? false
        timer.cancel()
        #expect(finished, "the publications did not finish within 2 minutes")
        #expect(delivered.withLockedValue { $0 } == 100_000)
    }
}
