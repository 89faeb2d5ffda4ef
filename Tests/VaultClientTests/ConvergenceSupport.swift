import Foundation
import Hummingbird
import HummingbirdTesting
import Synchronization
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

@testable import VaultClient

/// A seeded generator (SplitMix64), so a failing sequence can be replayed from its printed seed.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Makes the live server fail requests on purpose, as a broken link would: after `skip` more requests, the
/// next `fail` ones get a 503, either before the server handles them (`refuse`) or after it has handled
/// and committed them (`loseAnswer`: the device never learns what happened).
final class FaultInjector: Sendable {
    enum Mode: Sendable, CaseIterable { case refuse, loseAnswer }

    private struct Plan {
        var skip: Int
        var fail: Int
        var mode: Mode
    }

    private let plan = Mutex<Plan?>(nil)

    func arm(skip: Int, fail: Int, mode: Mode) { plan.withLock { $0 = Plan(skip: skip, fail: fail, mode: mode) } }

    func disarm() { plan.withLock { $0 = nil } }

    /// What to do with the next request: nil lets it through.
    func next() -> Mode? {
        plan.withLock { current in
            guard var p = current else { return nil }
            defer { current = p.fail > 0 ? p : nil }
            if p.skip > 0 {
                p.skip -= 1
                return nil
            }
            p.fail -= 1
            return p.mode
        }
    }
}

/// The server's router behind a `FaultInjector`.
struct FaultyResponder<Inner: HTTPResponder>: HTTPResponder where Inner.Context == VaultRequestContext {
    let inner: Inner
    let faults: FaultInjector

    func respond(to request: Request, context: VaultRequestContext) async throws -> Response {
        switch faults.next() {
        case nil:
            return try await inner.respond(to: request, context: context)
        case .refuse?:
            return Response(status: .serviceUnavailable)
        case .loseAnswer?:
            _ = try? await inner.respond(to: request, context: context)
            return Response(status: .serviceUnavailable)
        }
    }
}

/// A live server whose requests can be made to fail and whose clock can move, and the `ClientWorld`
/// helpers (devices, registration, approvals) against it.
struct ConvergenceWorld: Sendable {
    let world: ClientWorld
    let faults: FaultInjector
    let serverClock: TestClock

    static func run(_ backend: Backend, _ body: @escaping @Sendable (ConvergenceWorld) async throws -> Void) async throws {
        try await TestDatabase.with(backend) { repo in
            let admin = SigningKeyPair.generate()
            let faults = FaultInjector()
            let clock = TestClock()
            let start = clock.millis
            // Real time, moved as far as the test moved `clock`, as the devices' clocks are: a frozen server
            // clock fell outside the admin's ±5-minute signature window once a world ran five minutes (seen
            // on a loaded machine).
            let router = buildRouter(repository: repo, adminKey: admin.publicKey, clock: { Date().unixMillis + (clock.millis - start) })
            let app = Application(
                responder: FaultyResponder(inner: router.buildResponder(), faults: faults),
                configuration: .init(address: .hostname("127.0.0.1", port: 0))
            )
            try await app.test(.live) { client in
                let root = FileManager.default.temporaryDirectory.appendingPathComponent("carevault-converge-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: root) }
                let world = ClientWorld(repository: repo, baseURL: "http://127.0.0.1:\(client.port!)", admin: admin, root: root)
                try await body(ConvergenceWorld(world: world, faults: faults, serverClock: clock))
            }
        }
    }

    /// A device of `username` logged in on its own home folder, whose clock is real time shifted by
    /// however far the test moved `clock`.
    func patientDevice(_ name: String, username: String, password: String) async throws -> PatientDevice {
        let device = try world.device(name)
        let account = try await device.accounts.login(username: username, password: password)
        let clock = TestClock()
        let start = clock.millis
        let vault = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey) {
            Date().addingTimeInterval(Double(clock.millis - start) / 1_000)
        }
        return PatientDevice(name: name, vault: vault, clock: clock, start: start)
    }
}

/// One device of the patient and its movable clock.
struct PatientDevice: Sendable {
    let name: String
    let vault: PatientVault
    let clock: TestClock
    let start: UnixMillis

    /// How far this device's clock is from real time.
    var offset: Int64 { clock.millis - start }
}

/// What the patient's devices wrote, to judge the end state against: every activity write with its HLC
/// timestamp, and every outcome value recorded.
struct ConvergenceModel {
    struct ActivityWrite {
        var timestamp: HLCTimestamp
        /// The title written, or nil for a removal.
        var title: String?
    }

    var activityWrites: [String: [ActivityWrite]] = [:]
    /// Value ids recorded per outcome (activity id, occurrence).
    var values: [OutcomeKey: Set<String>] = [:]
    var shareActive = false

    struct OutcomeKey: Hashable, Comparable, CustomStringConvertible {
        var activity: String
        var occurrence: Int
        static func < (a: Self, b: Self) -> Bool { (a.activity, a.occurrence) < (b.activity, b.occurrence) }
        var description: String { "\(activity)#\(occurrence)" }
    }

    /// Last writer wins: the write with the greatest HLC timestamp decides each activity.
    var expectedActivities: [String: String?] {
        activityWrites.mapValues { writes in writes.max { $0.timestamp < $1.timestamp }!.title }
    }

    /// Records an activity write as the device stored it (its timestamp read back from the local store).
    mutating func noteActivity(_ id: String, title: String?, on device: PatientDevice) async throws {
        let rid = await device.vault.recordID(activity: id)
        let row = try #require(try device.vault.store.record(rid))
        activityWrites[id, default: []].append(ActivityWrite(timestamp: row.envelope.header.timestamp, title: title))
    }
}

/// The errors an interrupted sync may end with; anything else (an integrity failure above all) is a bug.
func isInterruption(_ error: any Error) -> Bool {
    if error is CancellationError { return true }
    guard let e = error as? ClientError else { return false }
    switch e {
    case .temporary, .serverUnreachable: return true
    default: return false
    }
}
