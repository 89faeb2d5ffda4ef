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
    @Test func aHundredThousandPublicationsRunOnASmallStack() throws {
        let hub = EventHub()
        let delivered = NIOLockedValueBox(0)
        hub.setRelay { _ in delivered.withLockedValue { $0 += 1 } }
        let notice = EventNotice.account(UUID())
        let finished = DispatchSemaphore(value: 0)
        let thread = Thread {
            for _ in 0..<100_000 { hub.publish(notice) }
            finished.signal()
        }
        thread.stackSize = 256 << 10
        thread.start()
        #expect(finished.wait(timeout: .now() + 120) == .success, "the publications did not finish within 2 minutes")
        #expect(delivered.withLockedValue { $0 } == 100_000)
    }
}
