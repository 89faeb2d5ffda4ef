import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultTestSupport

@testable import VaultServer

#if canImport(Glibc)
import Glibc
#endif

/// A stream whose client closed its socket gives its slot back at once, not at the next heartbeat's failed
/// write (15-36 s later): a client told to reconnect within a second (Docs/events.md §5) is never refused
/// by its own closed streams (Docs/events.md §6).
@Suite("Live events: a closed stream frees its slot at once")
struct EventSlotTests {
    @Test func streamsClosedByTheirClientEndAndTheAccountCanOpenAsManyAgain() async throws {
        var limits = EventHub.Limits(perAccount: 3, perInstance: 16)
        // No heartbeat within the test: only the closed sockets themselves can end the streams.
        limits.heartbeat = .seconds(120)
        try await EventsMemoryTests.live(limits) { hub, patient, port in
            func open() async throws -> [Int32] {
                let fds = (0..<3).map { _ in EventsMemoryTests.openStream(port: port, path: Routes.events, token: patient.token) }
                #expect(fds.allSatisfy { $0 >= 0 })
                try await Self.until("3 streams open") { hub.openStreams == 3 }
                return fds
            }
            for _ in 0..<2 {
                let fds = try await open()
                for fd in fds { close(fd) }
                // Far below the first heartbeat (15 s): only the closed sockets themselves can end them.
                try await Self.until("the closed streams ended", within: .seconds(10)) { hub.openStreams == 0 }
            }
        }
    }

    static func until(_ what: String, within limit: Duration = .seconds(30), _ done: () -> Bool) async throws {
        let deadline = ContinuousClock.now + limit
        while !done() {
            guard ContinuousClock.now < deadline else {
                Issue.record("\(what): not within \(limit)")
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
