import Foundation
import VaultAPI
import VaultCLI
import VaultClient
import VaultCore

/// `carevault-patient sync --watch`: keeps this device in sync until SIGINT or SIGTERM. It syncs when the
/// server's event stream says something changed (a change from another device, a share approved: its
/// keys go to the doctor at once), and when another command left versions in the outbox (`--offline`, or
/// a sync that could not reach the server). The stream only says when; every sync verifies as always.
struct SyncWatch {
    let options: GlobalOptions
    /// How often the outbox is looked at: one indexed count in the local database.
    static let outboxPoll: Duration = .milliseconds(250)

    /// What the parts share: whether the stream said `ready`, whether the last sync reached the server.
    final class State: @unchecked Sendable {
        private let lock = NSLock()
        private var ready = false
        private var reachable = true
        private var subscribed = false
        private var reported = Set<String>()

        func sawReady() { lock.withLock { ready = true } }
        func synced(reachable r: Bool) { lock.withLock { reachable = r } }
        var pushesPending: Bool { lock.withLock { reachable } }
        /// True once: the first sync after the stream first said `ready`.
        func subscribeNow() -> Bool {
            lock.withLock {
                guard ready, !subscribed else { return false }
                subscribed = true
                return true
            }
        }
        func isNew(_ problem: String) -> Bool { lock.withLock { reported.insert(problem).inserted } }
    }

    func run() async throws {
        let live = LiveRun(tool: "carevault-patient")
        live.endOnSignals()
        let vault = try await openVault(options)
        let stream = try vault.account.events(try options.transport())
        let json = options.json
        let state = State()
        let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { wake.finish() }
                for try await update in stream.updates(onRetry: { live.retrying($0) }) {
                    switch update {
                    case .ready:
                        live.connected()
                        state.sawReady()
                    case .change, .resync: break
                    case let .share(id, shareState, _):
                        if json {
                            live.json(ShareLine(share: id, state: shareState))
                        } else {
                            live.line(ShareLine.text(share: id, state: shareState))
                        }
                    case let .account(reason):
                        throw ClientError.notPermitted(code: .unauthorized, "the server ended this session's event stream (\(reason))")
                    }
                    wake.yield()
                }
            }
            group.addTask {
                // Versions written by other commands: pushed at once, unless the server is away (the
                // stream's next `ready` syncs then).
                while !Task.isCancelled {
                    try await Task.sleep(for: Self.outboxPoll)
                    if state.pushesPending, (try? await vault.unsentCount()) ?? 0 > 0 { wake.yield() }
                }
            }
            group.addTask {
                for await _ in wakes { try await sync(vault, live: live, state: state, json: json) }
            }
            // The first part to end (the stream refused, the account ended) ends the rest.
            try await group.next()
            group.cancelAll()
        }
    }

    /// One sync, reported on a line when it moved anything.
    func sync(_ vault: PatientVault, live: LiveRun, state: State, json: Bool) async throws {
        let summary: SyncSummary
        do {
            summary = try await vault.syncKeepingQuarantine()
            state.synced(reachable: true)
        } catch {
            if let passing = LiveRun.isPassing(error) {
                state.synced(reachable: false)
                live.retrying(passing)
                return
            }
            if case let ClientError.integrity(message) = error {
                if state.isNew(message) { live.integrity(message) }
                return
            }
            throw error
        }
        if state.subscribeNow() {
            if json { live.json(SubscribedLine(tool: "carevault-patient")) } else { live.line("watching") }
        }
        if let message = summary.quarantineMessage, state.isNew(message) { live.integrity(message) }
        for r in summary.rejected { Output.note("carevault-patient: warning: the server refused a version: \(r)") }
        for h in summary.healed { Output.note("carevault-patient: \(h)") }
        guard summary.pushed + summary.pulled + summary.conflictsResolved + summary.keysDelivered.count > 0 else { return }
        if json {
            live.json(SyncLine(summary))
        } else {
            live.line("sent \(summary.pushed), received \(summary.pulled), resolved \(summary.conflictsResolved) conflicts")
            if let keys = deliveredText(summary) { live.line(keys) }
        }
    }
}

/// `{"event":"sync",...}`: a sync that sent or received something.
struct SyncLine: Encodable {
    var event = "sync"
    var pushed: Int
    var pulled: Int
    var conflictsResolved: Int
    /// Approved shares whose keys were sealed to the doctor, "CATEGORY to USERNAME" (absent when none).
    var keysDelivered: [String]?

    init(_ s: SyncSummary) {
        pushed = s.pushed
        pulled = s.pulled
        conflictsResolved = s.conflictsResolved
        keysDelivered = s.keysDelivered.isEmpty ? nil : s.keysDelivered
    }
}
