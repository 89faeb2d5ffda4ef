import Foundation
import GRDB
import NIOHTTP1
import VaultAPI
import VaultCore
import VaultCrypto

/// What one sync did.
public struct SyncSummary: Sendable, Equatable, Codable {
    public var pushed = 0
    public var duplicates = 0
    public var pulled = 0
    /// Concurrent outcome copies merged, and local unsent versions that lost to a newer remote one.
    public var conflictsResolved = 0
    /// Versions the server refused, with its reasons.
    public var rejected: [String] = []
    public init() {}
}

/// Sync progress for a progress bar: phase, items done, items known so far.
public struct SyncProgress: Sendable {
    public enum Phase: String, Sendable { case keys, push, pull }
    public var phase: Phase
    public var done: Int
    public var total: Int?
}

/// A patient's data on this device: the care-data API, the sync engine and the share manager
/// (Docs/design.md §3-§5). Writes go to the local store first (with their outbox entry, in one transaction);
/// `sync` exchanges ciphertext with the server.
public actor PatientVault {
    nonisolated public let account: UnlockedAccount
    let transport: Transport
    let adminKey: SigningPublicKey
    nonisolated let store: LocalStore
    var keyring: Keyring
    let now: @Sendable () -> Date

    public init(account: UnlockedAccount, transport: Transport, adminKey: SigningPublicKey, now: @escaping @Sendable () -> Date = { Date() }) throws {
        guard account.profile.role == .patient else { throw ClientError.notPermitted(code: .forbidden, "this account is not a patient") }
        self.account = account
        self.transport = transport
        self.adminKey = adminKey
        self.now = now
        store = try LocalStore(url: account.store.storeURL)
        keyring = try Keyring.load(from: account.store.keyringURL, wrappingKey: account.wrappingKey, ownerID: account.profile.userID)
    }

    var me: UUID { account.profile.userID }
    var auth: Transport.Auth { get throws { try account.sessionAuth } }

    // MARK: Tresors

    /// The tresor of `category`, made (random epoch-1 key, saved in the keyring) on first use.
    func tresor(_ category: String) throws -> Tresor {
        if let t = keyring[category] { return t }
        do { try Activity.validateCategory(category) } catch { throw ClientError.invalidRequest("invalid category '\(category)': \(error)") }
        let t = Tresor.create(ownerID: me, category: category)
        keyring.merge(t)
        try saveKeyring()
        return t
    }

    func saveKeyring() throws {
        try keyring.save(to: account.store.keyringURL, wrappingKey: account.wrappingKey, ownerID: me)
    }

    func selfGrant(_ t: Tresor) throws -> Grant {
        try Grant.make(patient: account.identity, member: account.certificate, adminKey: adminKey, tresor: t, createdAt: Date().unixMillis)
    }

    /// Learns keys other devices made (from the self-grants on the server) and declares tresors and
    /// epochs the server does not know yet. When two devices made the same epoch offline, the server's
    /// keys win and this device re-seals its unsent versions under them.
    func reconcileTresors(attempt: Int = 0) async throws {
        let list: TresorList = try await transport.send(.GET, Routes.tresors, auth: try auth)
        var byCategory: [String: TresorInfo] = [:]
        for info in list.tresors {
            do {
                try info.selfGrant.verify(patient: account.certificate, adminKey: adminKey)
                // Everything is keyed by what the patient signed, never by the server's labels.
                guard info.selfGrant.memberID == me, info.ownerID == me, info.category == info.selfGrant.category,
                      info.tresorID == info.selfGrant.tresorID, info.selfGrant.hasContiguousEpochs, info.currentEpoch == info.selfGrant.epochs.last
                else { throw TrustError.mismatch(what: "self-grant", field: "tresor, category or epoch") }
            } catch { throw ClientError.integrity("the server's self-grant for a category is not what this account signed: \(error)") }
            let remote: Tresor
            do { remote = try info.selfGrant.openKeys(member: account.identity, patient: account.certificate, adminKey: adminKey) } catch {
                throw ClientError.from(error)
            }
            byCategory[info.category] = info
            if let local = keyring[info.category] {
                let clashing = remote.keys.filter { epoch, key in local.keys[epoch].map { $0 != key } ?? false }
                if !clashing.isEmpty { try reseal(category: info.category, adopting: remote) }
            }
            keyring.merge(remote)
        }
        try saveKeyring()
        for t in keyring.tresors.values where (byCategory[t.category]?.currentEpoch ?? 0) < t.currentEpoch {
            do {
                let _: TresorInfo = try await transport.send(.PUT, Routes.tresors, body: PutTresorRequest(selfGrant: try selfGrant(t)), auth: try auth)
            } catch ClientError.conflict {
                // Another device declared this epoch first with other keys: take theirs.
                guard attempt < 3 else { throw ClientError.temporary("the category keys keep changing on the server; sync again") }
                try await reconcileTresors(attempt: attempt + 1)
                return
            }
        }
    }

    /// Replaces this device's keys of `category` by `remote`'s and re-seals the unsent versions under them.
    func reseal(category: String, adopting remote: Tresor) throws {
        guard let local = keyring[category], local.id == remote.id, remote.category == category else {
            throw ClientError.integrity("refusing to adopt keys of another tresor for \(category)")
        }
        // Every local record of the category, not only unsent ones: a record sealed under a key that lost
        // must not stay unreadable. A record already re-sealed (after a crash before the keyring was
        // saved) opens with the remote keys instead.
        let rows = try store.queue.read { db in
            try Row.fetchAll(db, sql: "SELECT envelope FROM records WHERE category = ?", arguments: [category])
                .map { try JSONDecoder().decode(Envelope.self, from: $0["envelope"] as Data) }
        }
        let signing = account.identity.signing
        let cert = account.certificate
        try store.queue.write { db in
            for env in rows {
                let context = EnvelopeContext(ownerID: env.header.ownerID, tresorID: remote.id, category: category)
                if (try? env.open(keys: remote.keys, authorKey: cert.signingKey, expecting: context)) != nil { continue }
                let payload = try env.open(keys: local.keys, authorKey: cert.signingKey, expecting: context)
                var header = env.header
                header.epoch = remote.currentEpoch
                let resealed = try Envelope.seal(payload: payload, header: header, key: remote.currentKey, author: signing)
                try LocalStore.put(db, resealed, outbox: true)
            }
        }
        var replaced = keyring
        replaced = Keyring(tresors: replaced.tresors.filter { $0.key != category })
        replaced.merge(remote)
        keyring = replaced
    }

    // MARK: Writing care data

    /// Seals `record` (or a tombstone) as a new local version and queues it, in one transaction.
    @discardableResult
    func write(_ record: CareRecord?, type: RecordType, recordID: RecordID, category: String) throws -> Envelope {
        let t = try tresor(category)
        let identity = account.identity
        let me = self.me, device = account.profile.deviceID, wall = UInt64(max(0, now().unixMillis))
        return try store.queue.write { db in
            var clock = try LocalStore.clock(db, deviceID: device)
            let ts = try clock.tick(wallClockMs: wall)
            let header = RecordHeader(ownerID: me, tresorID: t.id, category: category, epoch: t.currentEpoch, recordType: type, recordID: recordID,
                                      timestamp: ts, deleted: record == nil, authorID: me)
            let env = try Envelope.seal(record: record, type: type, header: header, key: t.currentKey, author: identity.signing)
            try LocalStore.put(db, env, outbox: true)
            try LocalStore.save(db, clock: clock)
            return env
        }
    }

    /// Adds an activity; an existing id is a conflict (use `updateActivity`).
    public func addActivity(_ activity: Activity) throws {
        do { try activity.validate() } catch { throw ClientError.invalidRequest("invalid activity: \(error)") }
        if try self.activity(id: activity.id) != nil { throw ClientError.conflict("activity '\(activity.id)' exists; use update") }
        try write(.activity(activity), type: .activity, recordID: recordID(activity: activity.id), category: activity.category)
    }

    /// Adds many activities in one local transaction (an import); any invalid or existing id refuses all.
    public func addActivities(_ list: [Activity]) throws {
        for a in list {
            do { try a.validate() } catch { throw ClientError.invalidRequest("invalid activity \(a.id): \(error)") }
        }
        guard Set(list.map(\.id)).count == list.count else { throw ClientError.invalidRequest("duplicate activity ids in the import") }
        for category in Set(list.map(\.category)) { _ = try tresor(category) }
        let keyring = self.keyring, identity = account.identity, me = self.me, device = account.profile.deviceID
        let wall = UInt64(max(0, now().unixMillis))
        let ids = list.map { recordID(activity: $0.id) }
        try store.queue.write { db in
            var clock = try LocalStore.clock(db, deviceID: device)
            for (a, rid) in zip(list, ids) {
                if let existing = try LocalStore.record(db, rid.hex), !existing.deleted { throw ClientError.conflict("activity '\(a.id)' exists") }
                let t = keyring[a.category]!
                let header = RecordHeader(ownerID: me, tresorID: t.id, category: a.category, epoch: t.currentEpoch, recordType: .activity, recordID: rid,
                                          timestamp: try clock.tick(wallClockMs: wall), deleted: false, authorID: me)
                try LocalStore.put(db, try Envelope.seal(record: .activity(a), type: .activity, header: header, key: t.currentKey, author: identity.signing),
                                   outbox: true)
            }
            try LocalStore.save(db, clock: clock)
        }
    }

    /// Replaces an activity (same id; its category cannot change, that would move it to another tresor).
    public func updateActivity(_ activity: Activity) throws {
        do { try activity.validate() } catch { throw ClientError.invalidRequest("invalid activity: \(error)") }
        guard let old = try self.activity(id: activity.id) else { throw ClientError.notFound("no activity '\(activity.id)'") }
        guard old.category == activity.category else { throw ClientError.invalidRequest("an activity cannot change category; remove and add it") }
        var updated = activity
        updated.createdAt = old.createdAt
        updated.updatedAt = Date(unixMillis: now().unixMillis)
        try write(.activity(updated), type: .activity, recordID: recordID(activity: activity.id), category: activity.category)
    }

    /// Removes an activity (a tombstone version: an older copy replayed later never brings it back).
    public func removeActivity(id: String) throws {
        guard let old = try activity(id: id) else { throw ClientError.notFound("no activity '\(id)'") }
        try write(nil, type: .activity, recordID: recordID(activity: id), category: old.category)
    }

    /// Records a value for one occurrence of an activity, adding it to that occurrence's outcome.
    @discardableResult
    public func recordOutcome(activityID: String, occurrence: Int, value: OutcomeValue, note: String? = nil) throws -> Outcome {
        guard let activity = try activity(id: activityID) else { throw ClientError.notFound("no activity '\(activityID)'") }
        guard occurrence >= 0 else { throw ClientError.invalidRequest("the occurrence index must be 0 or more") }
        // Whole milliseconds: the form dates take in every encoding, so copies compare equal everywhere.
        let date = Date(unixMillis: now().unixMillis)
        var value = value
        value.createdAt = Date(unixMillis: value.createdAt.unixMillis)
        var outcome = try self.outcome(activityID: activityID, occurrence: occurrence)
            ?? Outcome(activityID: activityID, occurrence: occurrence, values: [], createdAt: date, updatedAt: date)
        outcome.values.append(value)
        if let note { outcome.note = note }
        outcome.updatedAt = date
        do { try outcome.validate() } catch { throw ClientError.invalidRequest("invalid outcome: \(error)") }
        try write(.outcome(outcome), type: .outcome, recordID: recordID(outcome: activityID, occurrence), category: activity.category)
        return outcome
    }

    func recordID(activity id: String) -> RecordID { RecordID.make(type: .activity, activityID: id, occurrence: nil, key: account.identity.recordIDKey) }
    func recordID(outcome id: String, _ occurrence: Int) -> RecordID {
        RecordID.make(type: .outcome, activityID: id, occurrence: occurrence, key: account.identity.recordIDKey)
    }

    // MARK: Reading care data (decrypted in memory)

    func open(_ row: LocalRecordRow) throws -> CareRecord? {
        guard let t = keyring[row.category] else { throw ClientError.integrity("no keys for category \(row.category)") }
        do {
            return try row.envelope.openRecord(keys: t.keys, authorKey: account.certificate.signingKey,
                                               expecting: EnvelopeContext(ownerID: me, tresorID: t.id, category: row.category)).record
        } catch { throw ClientError.from(error) }
    }

    /// Activities, optionally of one category, sorted by id.
    public func activities(category: String? = nil) throws -> [Activity] {
        try store.records(category: category, type: .activity).filter { !$0.deleted }.compactMap {
            if case let .activity(a)? = try open($0) { return a } else { return nil }
        }.sorted { $0.id < $1.id }
    }

    public func activity(id: String) throws -> Activity? {
        guard let row = try store.queue.read({ db in try LocalStore.record(db, self.recordID(activity: id).hex) }), !row.deleted else { return nil }
        if case let .activity(a)? = try open(row) { return a }
        return nil
    }

    func outcome(activityID: String, occurrence: Int) throws -> Outcome? {
        guard let row = try store.queue.read({ db in try LocalStore.record(db, self.recordID(outcome: activityID, occurrence).hex) }), !row.deleted else {
            return nil
        }
        if case let .outcome(o)? = try open(row) { return o }
        return nil
    }

    /// Outcomes, optionally of one activity and of occurrences starting within [from, to).
    public func outcomes(activityID: String? = nil, category: String? = nil, from: Date? = nil, to: Date? = nil) throws -> [Outcome] {
        let all = try store.records(category: category, type: .outcome).filter { !$0.deleted }.compactMap { row -> Outcome? in
            if case let .outcome(o)? = try open(row) { return o } else { return nil }
        }
        let acts = Dictionary(try activities().map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        return all.filter { o in
            if let activityID, o.activityID != activityID { return false }
            guard from != nil || to != nil else { return true }
            guard let event = acts[o.activityID]?.schedule.event(occurrence: o.occurrence) else { return false }
            if let from, event.start < from { return false }
            if let to, event.start >= to { return false }
            return true
        }.sorted { ($0.activityID, $0.occurrence) < ($1.activityID, $1.occurrence) }
    }

    /// How many local versions wait for the server.
    public func pendingCount() throws -> Int { try store.outboxCount() }

    // MARK: Sync

    /// Pushes the outbox in batches, then pulls pages until done (Docs/design.md §5). Safe to interrupt at
    /// any point: the outbox entry goes only when the server acknowledged it, and a pulled page is
    /// applied together with the cursor advance.
    public func sync(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws -> SyncSummary {
        var summary = SyncSummary()
        progress?(SyncProgress(phase: .keys, done: 0, total: nil))
        try await reconcileTresors()
        // Pull first: a concurrent outcome is merged with the unsent local copy before that copy is pushed.
        try await pull(&summary, progress: progress)
        try await push(&summary, progress: progress)
        return summary
    }

    /// Pushes the outbox in batches, two in flight: while the server verifies and stores one batch, this
    /// device reads the next and acknowledges the previous, so both sides work at once. The batches hold
    /// different records (one outbox entry per record), so their order at the server does not matter;
    /// each batch is acknowledged in its own transaction, and an interrupted push leaves the unacknowledged
    /// batches queued (the server answers a repeat as a duplicate).
    func push(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws {
        let total = try store.outboxCount()
        var done = 0
        var position: Int64 = 0
        var inFlight: (batch: [OutboxItem], answer: Task<PushResponse, any Error>)?
        defer { inFlight?.answer.cancel() }
        let auth = try self.auth
        while true {
            let batch = try store.outbox(after: position, limit: SyncPolicy.pushBatch)
            var next: (batch: [OutboxItem], answer: Task<PushResponse, any Error>)?
            if let last = batch.last {
                position = last.position
                let body = Self.pushBody(batch)
                let transport = self.transport
                next = (batch, Task { try await transport.send(.POST, Routes.records, json: body, auth: auth) })
            }
            if let (previous, answer) = inFlight {
                inFlight = nil
                let response: PushResponse
                do { response = try await answer.value } catch {
                    next?.answer.cancel()
                    throw error
                }
                guard response.results.count == previous.count else { throw ClientError.integrity("the server answered a push with the wrong number of results") }
                let rejected = try acknowledge(previous, response.results)
                summary.pushed += response.results.filter { $0.status == .stored }.count
                summary.duplicates += response.results.filter { $0.status == .duplicate }.count
                summary.rejected += rejected
                done += previous.count
                progress?(SyncProgress(phase: .push, done: done, total: max(total, done)))
            }
            guard let next else { return }
            inFlight = next
        }
    }

    /// A push request made of the envelopes' stored JSON: `{"envelopes":[…]}`.
    static func pushBody(_ batch: [OutboxItem]) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(batch.reduce(32) { $0 + $1.json.count + 1 })
        body.append(contentsOf: #"{"envelopes":["#.utf8)
        for (i, item) in batch.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: item.json)
        }
        body.append(contentsOf: "]}".utf8)
        return body
    }

    /// Removes acknowledged versions from the outbox and records refused ones, in one transaction.
    func acknowledge(_ batch: [OutboxItem], _ results: [PushResult]) throws -> [String] {
        try store.queue.write { db in
            var rejected: [String] = []
            for (item, result) in zip(batch, results) {
                guard result.versionID == item.versionID else { throw ClientError.integrity("the server acknowledged a version that was not sent") }
                switch result.status {
                case .stored, .duplicate:
                    try LocalStore.dropOutbox(db, versionID: item.versionID)
                    try LocalStore.noteServerIfNewer(db, item.envelope.header.recordID.hex, item.envelope.header.timestamp)
                case .rejected:
                    let reason = "\(result.code?.rawValue ?? "rejected"): \(result.reason ?? "no reason given")"
                    try db.execute(sql: "INSERT OR REPLACE INTO rejected (version_id, record_id, reason, at) VALUES (?, ?, ?, ?)",
                                   arguments: [item.versionID, item.envelope.header.recordID.hex, reason, Date().unixMillis])
                    try LocalStore.dropOutbox(db, versionID: item.versionID)
                    rejected.append(reason)
                }
            }
            return rejected
        }
    }

    func pull(_ summary: inout SyncSummary, progress: (@Sendable (SyncProgress) -> Void)?) async throws {
        var cursor = try store.cursor()
        while true {
            let page: PullResponse = try await transport.send(.GET, Routes.records + "?since=\(cursor)&limit=\(SyncPolicy.pullPage)", auth: try auth)
            let merged = try apply(page, after: cursor)
            summary.conflictsResolved += merged
            summary.pulled += page.changes.count
            progress?(SyncProgress(phase: .pull, done: summary.pulled, total: nil))
            if page.changes.isEmpty || page.done { return }
            cursor = page.nextCursor
        }
    }

    /// Verifies and applies one page and advances the cursor, in one transaction: any integrity failure
    /// applies nothing. Returns how many conflicts it resolved.
    func apply(_ page: PullResponse, after cursor: UInt64) throws -> Int {
        guard page.changes.allSatisfy({ $0.sequence > cursor }), page.nextCursor >= cursor,
              zip(page.changes, page.changes.dropFirst()).allSatisfy({ $0.sequence < $1.sequence })
        else { throw ClientError.integrity("the server sent changes out of order") }
        let me = self.me, device = account.profile.deviceID, identity = account.identity, cert = account.certificate
        let keyring = self.keyring
        let wall = UInt64(max(0, now().unixMillis))
        return try store.queue.write { db in
            var clock = try LocalStore.clock(db, deviceID: device)
            var resolved = 0
            for change in page.changes {
                let env = change.envelope
                guard let t = keyring[env.header.category], t.id == env.header.tresorID else {
                    throw ClientError.integrity("a pulled record names a tresor this account does not have")
                }
                let opened: OpenedRecord
                do {
                    opened = try env.openRecord(keys: t.keys, authorKey: cert.signingKey,
                                                expecting: EnvelopeContext(ownerID: me, tresorID: t.id, category: t.category))
                } catch { throw ClientError.from(error) }
                let rid = env.header.recordID.hex
                let local = try LocalStore.record(db, rid)
                // The server's head only moves forward: an older version than it showed before is a replay.
                if let seen = local?.serverTimestamp, env.header.timestamp < seen {
                    throw ClientError.integrity("the server replayed an older version of a record (\(env.header.timestamp) after \(seen))")
                }
                do { _ = try clock.receive(env.header.timestamp, wallClockMs: wall) } catch {
                    throw ClientError.integrity("a pulled record's clock is too far in the future: \(error)")
                }
                let context = EnvelopeContext(ownerID: me, tresorID: t.id, category: t.category)
                let copy: LocalCopy? = try local.map { local in
                    var mine: Outcome?
                    if local.recordType == .outcome, !local.deleted,
                       case let .outcome(o)? = try local.envelope.openRecord(keys: t.keys, authorKey: cert.signingKey, expecting: context).record {
                        mine = o
                    }
                    return LocalCopy(timestamp: local.timestamp, deleted: local.deleted, pending: local.pending, outcome: mine)
                }
                var theirs: Outcome?
                if case let .outcome(o)? = opened.record { theirs = o }
                let remote = Versioned(timestamp: env.header.timestamp, deleted: env.header.deleted, payload: theirs)
                switch Reconciliation.resolve(local: copy, remote: remote) {
                case let .adoptRemote(dropOutbox):
                    if dropOutbox {
                        try LocalStore.dropOutbox(db, recordID: rid)
                        resolved += 1
                    }
                    try LocalStore.put(db, env, outbox: false, serverTimestamp: env.header.timestamp)
                case .keepLocal:
                    try LocalStore.noteServerIfNewer(db, rid, env.header.timestamp)
                case let .writeMerged(merged):
                    // Outcome values are a set: merged, so no device's readings are lost, whether the local
                    // copy is unsent or was sent but lost at the server.
                    var header = env.header
                    header.timestamp = try clock.tick(wallClockMs: wall)
                    header.epoch = t.currentEpoch
                    let sealed = try Envelope.seal(record: .outcome(merged), type: .outcome, header: header, key: t.currentKey, author: identity.signing)
                    try LocalStore.put(db, sealed, outbox: true)
                    try LocalStore.noteServerIfNewer(db, rid, env.header.timestamp)
                    resolved += 1
                }
            }
            try LocalStore.save(db, clock: clock)
            try LocalStore.setMeta(db, "cursor", String(page.changes.last?.sequence ?? cursor))
            return resolved
        }
    }
}
