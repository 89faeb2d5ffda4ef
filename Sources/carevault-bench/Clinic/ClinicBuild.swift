import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto

/// The clinic's people, built through the real API and the tools' SDK: registrations approved by the admin
/// (`AdminClient`, as Scripts/approve does), records sealed and pushed by each patient's device with its
/// commitments, shares granted by patients and approved by the admin, keys delivered by the next sync.
final class ClinicBuild: Sendable {
    let plan: ClinicPlan
    let admin: SigningKeyPair
    let urls: [String]
    let root: URL
    let desk = SerialDesk()
    let doctors: [ClinicDoctor]
    let patients = NIOLockedValueBox([ClinicPatient]())

    static let password = "clinic-password-1"

    private init(plan: ClinicPlan, admin: SigningKeyPair, urls: [String], root: URL, doctors: [ClinicDoctor]) {
        self.plan = plan
        self.admin = admin
        self.urls = urls
        self.root = root
        self.doctors = doctors
    }

    /// A device's account manager on instance `instance`. Devices are spread over 8 connection pools per
    /// instance (the SDK keeps one pool per timeout, 8 connections per host): a clinic's devices are
    /// separate machines, not one process queueing behind 8 connections.
    func manager(_ name: String, instance: Int, spread: Int) throws -> AccountManager {
        let transport = try Transport(baseURL: urls[instance], timeout: .seconds(30) + .milliseconds(spread % 8))
        let home = Home(url: root.appendingPathComponent("devices").appendingPathComponent(name))
        return AccountManager(
            configuration: ClientConfiguration(server: urls[instance], home: home, adminKey: admin.publicKey, kdf: .interactive),
            transport: transport
        )
    }

    func adminClient() throws -> AdminClient { try AdminClient(baseURL: urls[0], key: admin) }

    /// Approves whatever is pending, from the one desk.
    func approveAll() async throws { _ = try await desk.run { try await self.adminClient().approveAll() } }

    /// Registers, approves and logs in the doctors (the first `plan.watchers` watch).
    static func make(plan: ClinicPlan, admin: SigningKeyPair, urls: [String], root: URL) async throws -> ClinicBuild {
        let names = (0..<plan.doctors).map { String(format: "dr-%03d", $0) }
        let holder = ClinicBuild(plan: plan, admin: admin, urls: urls, root: root, doctors: [])
        let accounts = try await holder.accounts(names, role: .doctor, offset: 0)
        let doctors = try accounts.enumerated().map { i, pair in
            ClinicDoctor(
                index: i,
                name: names[i],
                reader: try DoctorReader(account: pair.0, transport: pair.1, adminKey: admin.publicKey),
                transport: pair.1,
                instance: i % urls.count,
                watcher: i < plan.watchers
            )
        }
        return ClinicBuild(plan: plan, admin: admin, urls: urls, root: root, doctors: doctors)
    }

    /// Registers every name, approves them all at once, then logs each in (devices keep their keys).
    func accounts(_ names: [String], role: Role, offset: Int) async throws -> [(UnlockedAccount, Transport)] {
        let managers = try names.enumerated().map { i, n in try manager(n, instance: (offset + i) % urls.count, spread: offset + i) }
        try await forEach(Array(managers.enumerated()), concurrency: 4) { i, m in
            _ = try await m.register(username: names[i], password: Self.password, role: role)
        }
        try await approveAll()
        let out = NIOLockedValueBox([(Int, UnlockedAccount, Transport)]())
        try await forEach(Array(managers.enumerated()), concurrency: 4) { i, m in
            let account = try await m.login(username: names[i], password: Self.password, remember: true)
            out.withLockedValue { $0.append((i, account, m.transport)) }
        }
        return out.withLockedValue { $0 }.sorted { $0.0 < $1.0 }.map { ($0.1, $0.2) }
    }

    /// The shares patient `i` asks for: one to three doctors, each given one to three categories.
    func shares(forPatient i: Int) -> Set<ClinicShare> {
        var rng = SeededRandom(seed: plan.seed &+ UInt64(i) &* 7_919)
        let doctorCount = Int.random(in: 1...min(3, doctors.count), using: &rng)
        var chosen = Set<Int>()
        while chosen.count < doctorCount { chosen.insert(Int.random(in: 0..<doctors.count, using: &rng)) }
        var out = Set<ClinicShare>()
        for d in chosen {
            let categories = ClinicPlan.categories.shuffled(using: &rng).prefix(Int.random(in: 1...3, using: &rng))
            for c in categories { out.insert(ClinicShare(doctor: d, category: c)) }
        }
        return out
    }

    /// Builds patients `range`: registered and approved, records imported and pushed, shares granted and
    /// approved, keys delivered, and every doctor's first read of them done (not timed as refreshes).
    func load(_ range: Range<Int>) async throws {
        let names = range.map { String(format: "pt-%04d", $0) }
        let accounts = try await accounts(names, role: .patient, offset: range.lowerBound)
        let built = try accounts.enumerated().map { k, pair in
            let i = range.lowerBound + k
            return ClinicPatient(
                index: i,
                name: names[k],
                vault: try PatientVault(account: pair.0, transport: pair.1, adminKey: admin.publicKey),
                instance: i % urls.count
            )
        }
        patients.withLockedValue { $0 += built }
        try await forEach(built, concurrency: plan.loadConcurrency) { p in try await self.fill(p) }
        try await approveAll()
        try await forEach(built, concurrency: plan.loadConcurrency) { p in
            let summary = try await p.vault.sync()
            guard summary.rejected.isEmpty else { throw BenchError("\(p.name): the key delivery sync rejected \(summary.rejected)") }
        }
        for p in built {
            for s in p.state.withLockedValue({ $0.shares }) {
                doctors[s.doctor].patients.withLockedValue { if !$0.contains(p.index) { $0.append(p.index) } }
            }
        }
        // Each doctor's first read of the new patients, doctors side by side.
        try await forEach(doctors, concurrency: 2) { d in
            let mine = Set(d.patients.withLockedValue { $0 }).intersection(range)
            for i in mine.sorted() {
                let view = try await d.reader.view(patient: self.patient(i).name)
                guard view.complete, view.quarantined.isEmpty else {
                    throw BenchError(
                        "\(d.name)'s first read of \(self.patient(i).name) is not complete: \(view.completenessMessage ?? view.quarantineMessage ?? "")"
                    )
                }
            }
        }
    }

    func patient(_ i: Int) -> ClinicPatient { patients.withLockedValue { $0[i] } }

    /// One patient's records (one activity per category, outcomes round-robin over them), its share
    /// requests, and the sync that pushes everything.
    private func fill(_ p: ClinicPatient) async throws {
        let activities = try ClinicPlan.categories.map { c in
            try BenchRecords.activity(id: ClinicPatient.activityID(c), title: "Daily \(c)", category: c)
        }
        let outcomeCount = plan.recordsPerPatient - activities.count
        var next: [String: Int] = [:]
        var outcomes: [Outcome] = []
        outcomes.reserveCapacity(outcomeCount)
        for j in 0..<outcomeCount {
            let activity = activities[j % activities.count].id
            let occurrence = next[activity, default: 0]
            next[activity] = occurrence + 1
            outcomes.append(BenchRecords.outcome(activityID: activity, occurrence: occurrence, note: "ok"))
        }
        _ = try await p.vault.importCare(activities: activities, outcomes: outcomes)
        let wanted = shares(forPatient: p.index)
        for s in wanted.sorted(by: { ($0.doctor, $0.category) < ($1.doctor, $1.category) }) {
            _ = try await p.vault.grant(doctor: doctors[s.doctor].name, category: s.category)
        }
        let summary = try await p.vault.sync()
        guard summary.pushed == plan.recordsPerPatient, summary.rejected.isEmpty else {
            throw BenchError("\(p.name): the first sync pushed \(summary.pushed) of \(plan.recordsPerPatient) (rejected \(summary.rejected))")
        }
        let ids =
            activities.map { p.recordID(activity: $0.id, occurrence: nil) }
            + outcomes.map { p.recordID(activity: $0.activityID, occurrence: $0.occurrence) }
        p.state.withLockedValue { s in
            s.shares = wanted
            s.next = next
            s.acked = ids
        }
    }
}
