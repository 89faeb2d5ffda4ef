import ClinicAudit
import Foundation
import NIOConcurrencyHelpers
import VaultClient
import VaultCore
import VaultCrypto

/// A share the clinic holds: a doctor (by index) and a category.
struct ClinicShare: Hashable, Sendable {
    var doctor: Int
    var category: String
}

/// One patient of the clinic: a device (its own home, local store and transport) on one instance, and
/// what the simulation knows of it: the shares it granted, the records the server acknowledged.
final class ClinicPatient: Sendable {
    let index: Int
    let name: String
    let vault: PatientVault
    let instance: Int
    let state = NIOLockedValueBox(State())

    struct State {
        var shares = Set<ClinicShare>()
        /// The next occurrence to record, per activity.
        var next: [String: Int] = [:]
        /// Record ids (hex) a sync carried without error: the server acknowledged them.
        var acked: [String] = []
        /// Record ids recorded since the last sync that returned.
        var pending: [String] = []
        var busy = false
    }

    init(index: Int, name: String, vault: PatientVault, instance: Int) {
        self.index = index
        self.name = name
        self.vault = vault
        self.instance = instance
    }

    var id: UUID { vault.account.identity.userID }
    var recordIDKey: SymmetricKey { vault.account.identity.recordIDKey }

    static func activityID(_ category: String) -> String { "clinic-\(category)" }

    /// A value as the view audit compares it: its id, value and units.
    static func text(_ v: OutcomeValue) -> String { "\(v.id) \(v.value) \(v.units ?? "")" }

    func recordID(activity: String, occurrence: Int?) -> String {
        RecordID.make(type: occurrence == nil ? .activity : .outcome, activityID: activity, occurrence: occurrence, key: recordIDKey).hex
    }

    /// Claims the patient for one operation (one device does one thing at a time); false when busy.
    func claim() -> Bool {
        state.withLockedValue { s in
            if s.busy { return false }
            s.busy = true
            return true
        }
    }

    func release() { state.withLockedValue { $0.busy = false } }

    /// Waits until the patient's device is free and claims it: the next thing a person does on one device
    /// waits for the last, and that wait is part of its latency (the arrival time stands).
    func claimWaiting() async throws {
        while !claim() { try await Task.sleep(for: .milliseconds(5)) }
    }

    /// The patient's own records in `categories`, as the audit of a doctor's view names them.
    func items(categories: Set<String>) async throws -> [ClinicViewAudit.Item] {
        var out: [ClinicViewAudit.Item] = []
        for category in categories.sorted() {
            out += try await vault.activities(category: category).map { .init(activityID: $0.id, occurrence: nil, values: []) }
            out += try await vault.outcomes(category: category).map {
                .init(activityID: $0.activityID, occurrence: $0.occurrence, values: $0.values.map(Self.text))
            }
        }
        return out
    }
}

/// One doctor: a device on one instance, refreshing or watching.
final class ClinicDoctor: Sendable {
    let index: Int
    let name: String
    let reader: DoctorReader
    let transport: Transport
    let instance: Int
    let watcher: Bool
    /// Patients (indices) who share something with this doctor.
    let patients = NIOLockedValueBox([Int]())
    let busy = NIOLockedValueBox(false)

    init(index: Int, name: String, reader: DoctorReader, transport: Transport, instance: Int, watcher: Bool) {
        self.index = index
        self.name = name
        self.reader = reader
        self.transport = transport
        self.instance = instance
        self.watcher = watcher
    }

    func claim() -> Bool {
        busy.withLockedValue { b in
            if b { return false }
            b = true
            return true
        }
    }

    func release() { busy.withLockedValue { $0 = false } }

    /// Waits until the doctor is free and claims them (see `ClinicPatient.claimWaiting`).
    func claimWaiting() async throws {
        while !claim() { try await Task.sleep(for: .milliseconds(5)) }
    }

    static func items(_ view: PatientView) -> [ClinicViewAudit.Item] {
        view.activities.map { .init(activityID: $0.id, occurrence: nil, values: []) }
            + view.outcomes.map { .init(activityID: $0.activityID, occurrence: $0.occurrence, values: $0.values.map(ClinicPatient.text)) }
    }
}

/// Runs `body` for each item, at most `concurrency` at once; the first error ends the run.
func forEach<T: Sendable>(_ items: [T], concurrency: Int, _ body: @escaping @Sendable (T) async throws -> Void) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        var running = 0
        for item in items {
            if running >= max(1, concurrency) {
                try await group.next()
                running -= 1
            }
            group.addTask { try await body(item) }
            running += 1
        }
        try await group.waitForAll()
    }
}

/// One at a time, in order of arrival: the admin approves from one desk (two approvals of the same pending
/// item would have the second refused).
actor SerialDesk {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func run<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        if busy {
            await withCheckedContinuation { waiting.append($0) }
        } else {
            busy = true
        }
        defer {
            if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
        }
        return try await body()
    }
}
