import Foundation
import Synchronization
import Testing
import VaultAPI
import VaultCore
import VaultTestSupport

@testable import VaultServer

/// Group commit of the standalone audit appends (`AuditBatcher`, Docs/design.md §6).
@Suite("Server: audit appends in batches")
struct AuditBatcherTests {
    struct Broken: Error, Equatable {}

    /// A write that records each batch, holds the first until `release`, and throws for the batches
    /// `fail` names (by their index).
    final class Writes: Sendable {
        let batches = Mutex<[[AuditEvent]]>([])
        let gate = AsyncStream<Void>.makeStream()
        let fail: Set<Int>
        init(fail: Set<Int> = []) { self.fail = fail }

        var count: Int { batches.withLock { $0.count } }
        var sizes: [Int] { batches.withLock { $0.map(\.count) } }
        func release() { gate.continuation.yield() }

        func write(_ events: [AuditEvent]) async throws {
            let index = batches.withLock { b in
                b.append(events)
                return b.count - 1
            }
            if index == 0 { for await _ in gate.stream { break } }
            if fail.contains(index) { throw Broken() }
        }
    }

    static func event(_ n: Int, patient: UUID? = nil) -> AuditEvent {
        AuditEvent(actor: "doc", action: "records.read", patientID: patient, details: ["n": String(n)])
    }

    /// Waits (briefly) until `condition` holds.
    static func until(_ condition: @Sendable () async -> Bool) async throws {
        for _ in 0..<500 {
            if await condition() { return }
            try await Task.sleep(for: .milliseconds(5))
        }
        Issue.record("timed out")
    }

    @Test func aLoneEventIsWrittenAtOnceAndThoseArrivingMeanwhileFormTheNextBatches() async throws {
        let writes = Writes()
        let batcher = AuditBatcher(maxBatch: 3) { events, _ in try await writes.write(events) }
        let first = Task { try await batcher.append(Self.event(0), now: 1) }
        try await Self.until { writes.count == 1 }
        let later = (1...7).map { n in Task { try await batcher.append(Self.event(n), now: 2) } }
        try await Self.until { await batcher.waiting == 7 }
        writes.release()
        try await first.value
        for t in later { try await t.value }
        #expect(writes.sizes == [1, 3, 3, 1], "the first alone, then at most three a transaction")
        #expect(await batcher.transactions == 4)
        #expect(await batcher.events == 8)
        // Each event keeps its own time; the batch is written in the order the events arrived.
        let written = writes.batches.withLock { $0 }
        #expect(written[0][0].at == 1 && written[1].allSatisfy { $0.at == 2 })
        #expect(Set(written.dropFirst().joined().map { $0.details["n"]! }) == Set((1...7).map(String.init)))
    }

    @Test func aFailedTransactionFailsEveryEventInItAndTheNextOneWorks() async throws {
        let writes = Writes(fail: [1])
        let batcher = AuditBatcher { events, _ in try await writes.write(events) }
        let first = Task { try await batcher.append(Self.event(0), now: 1) }
        try await Self.until { writes.count == 1 }
        let doomed = (1...5).map { n in Task { try await batcher.append(Self.event(n), now: 2) } }
        try await Self.until { await batcher.waiting == 5 }
        writes.release()
        try await first.value
        for t in doomed { await #expect(throws: Broken.self) { try await t.value } }
        try await batcher.append(Self.event(6), now: 3)
        #expect(writes.sizes == [1, 5, 1])
    }

    /// Over the real store: two reads of one patient in one batch link to each other, not both to the
    /// stored head, and the chain verifies.
    @Test(arguments: Backend.allCases)
    func eventsAboutOnePatientInOneBatchLinkOneToTheNext(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let patient = UUID()
            let other = UUID()
            try await repo.appendAudit([Self.event(0, patient: patient)], now: 1)
            let batcher = AuditBatcher(repository: repo)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 1...40 { group.addTask { try await batcher.append(Self.event(n, patient: n % 3 == 0 ? other : patient), now: 2) } }
                try await group.waitForAll()
            }
            #expect(await batcher.events == 40)
            #expect(try await repo.verifyAudit().ok)
            let key = try AuditBuilder.patientKey(patient, serverSecret: try await repo.serverSecret())
            let mine = try await repo.auditEntries(after: 0, limit: 1_000, patientID: patient)
            #expect(mine.count == 1 + 40 - 13)
            var previous: String?
            for e in mine {
                #expect(e.patientLink == AuditChain.patientLink(key: key, previous: previous), "entry \(e.sequence)")
                previous = e.hash
            }
        }
    }

    /// A batch larger than one insert statement and than one patient-head lookup (64 each): the entries
    /// are stored in order, and each patient's first entry in it links to that patient's stored head.
    @Test(arguments: Backend.allCases)
    func aLargeBatchIsStoredInOrderWithEveryPatientsLinks(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let patients = (0..<70).map { _ in UUID() }
            try await repo.appendAudit(patients.prefix(35).map { Self.event(-1, patient: $0) }, now: 1)
            let events = (0..<150).map { n in Self.event(n, patient: n % 5 == 4 ? nil : patients[n % patients.count]) }
            try await repo.appendAudit(events, now: 2)
            #expect(try await repo.verifyAudit().ok)
            let all = try await repo.auditEntries(after: 35, limit: 1_000, patientID: nil)
            #expect(all.map { $0.details["n"]! } == (0..<150).map(String.init))
            let secret = try await repo.serverSecret()
            for p in patients {
                let key = try AuditBuilder.patientKey(p, serverSecret: secret)
                var previous: String?
                for e in try await repo.auditEntries(after: 0, limit: 1_000, patientID: p) {
                    #expect(e.patientLink == AuditChain.patientLink(key: key, previous: previous), "entry \(e.sequence)")
                    previous = e.hash
                }
            }
        }
    }

    /// Two instances on one PostgreSQL, each with its own batcher, appending at once: the head's lock
    /// orders their batches into one chain, every patient's links hold, and there are fewer transactions
    /// than reads, with no delay added anywhere.
    @Test(.enabled(if: PostgresTestServer.url != nil || PostgresTestServer.required))
    func twoInstancesBatchIntoOneChain() async throws {
        try await MultiInstanceTests.twoInstances { a, b in
            let batchers = [AuditBatcher(repository: a), AuditBatcher(repository: b)]
            let patients = (0..<5).map { _ in UUID() }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<200 {
                    group.addTask { try await batchers[n % 2].append(Self.event(n, patient: patients[n % patients.count]), now: 1) }
                }
                try await group.waitForAll()
            }
            let transactions = await batchers[0].transactions + batchers[1].transactions
            #expect(transactions < 200, "\(transactions) transactions for 200 reads")
            #expect(try await a.verifyAudit().ok)
            #expect(try await b.auditEntries(after: 0, limit: 1_000, patientID: nil).count == 200)
            let secret = try await a.serverSecret()
            for p in patients {
                let key = try AuditBuilder.patientKey(p, serverSecret: secret)
                var previous: String?
                for e in try await b.auditEntries(after: 0, limit: 1_000, patientID: p) {
                    #expect(e.patientLink == AuditChain.patientLink(key: key, previous: previous), "entry \(e.sequence)")
                    previous = e.hash
                }
            }
        }
    }
}
