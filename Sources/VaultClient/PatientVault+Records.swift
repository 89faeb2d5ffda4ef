import Foundation
import VaultCore
import VaultCrypto

/// One new local version to seal and queue: a record (nil for a tombstone) and where it belongs.
struct LocalChange {
    var record: CareRecord?
    var type: RecordType
    var recordID: RecordID
    var category: String
    /// When set, a live local copy of the record refuses the whole write with this conflict message.
    var conflictIfLive: String?
}

extension PatientVault {
    // MARK: Writing care data

    /// Seals `record` (or a tombstone) as a new local version and queues it, in one transaction.
    @discardableResult
    func write(_ record: CareRecord?, type: RecordType, recordID: RecordID, category: String) throws -> Envelope {
        try write([LocalChange(record: record, type: type, recordID: recordID, category: category)])[0]
    }

    /// Seals every change as a new local version and queues it, all in one transaction: one refused
    /// change writes nothing. A record stays in the category it was first written in, even after its
    /// tombstone (Docs/design.md §4): its id is derived from the activity id alone, so writing it under
    /// another category would move it to another tresor, whose readers never see the first one's tombstone.
    @discardableResult
    func write(_ changes: [LocalChange]) throws -> [Envelope] {
        for category in Set(changes.map(\.category)) { _ = try tresor(category) }
        let seal = keyringSeal
        let identity = account.identity
        let me = self.me
        let wall = wallClockMs
        return try store.write(deviceID: account.profile.deviceID) { tx, clock in
            // The keys as committed: another process on this home may have rotated a category since this
            // vault opened, and a record must never be sealed under an epoch a rotation ended.
            let keyring = try tx.keyring(seal)
            return try changes.map { change in
                let existing = try tx.record(change.recordID.hex)
                if let message = change.conflictIfLive, let existing, !existing.deleted { throw ClientError.conflict(message) }
                if let existing, existing.category != change.category {
                    let id = change.record?.asActivity?.id ?? change.record?.asOutcome?.activityID ?? "?"
                    throw ClientError.invalidRequest("activity '\(id)' was in category '\(existing.category)'; choose another id")
                }
                guard let t = keyring[change.category] else { throw ClientError.localState("no keys for \(change.category)") }
                // Never below an epoch the patient's signed data showed: a member removed since holds the older keys.
                if let top = try tx.ledgerState(category: change.category)?.topEpoch, top > t.currentEpoch {
                    throw ClientError.integrity(
                        "key epoch \(top) of \(change.category) exists but this device lacks its key (the server withholds it); nothing was written"
                    )
                }
                let header = RecordHeader(
                    ownerID: me,
                    tresorID: t.id,
                    category: change.category,
                    epoch: t.currentEpoch,
                    recordType: change.type,
                    recordID: change.recordID,
                    timestamp: try clock.tick(wallClockMs: wall),
                    deleted: change.record == nil,
                    authorID: me
                )
                let env = try Envelope.seal(record: change.record, type: change.type, header: header, key: t.currentKey, author: identity.signing)
                try tx.put(env, outbox: true)
                return env
            }
        }
    }

    /// Adds an activity; an existing id is a conflict (use `updateActivity`).
    public func addActivity(_ activity: Activity) throws {
        try Self.validate(activity, "invalid activity")
        if try self.activity(id: activity.id) != nil { throw ClientError.conflict("activity '\(activity.id)' exists; use update") }
        try write(.activity(activity), type: .activity, recordID: recordID(activity: activity.id), category: activity.category)
    }

    /// Adds many activities in one local transaction (an import); any invalid or existing id refuses all.
    public func addActivities(_ list: [Activity]) throws {
        for a in list { try Self.validate(a, "invalid activity \(a.id)") }
        guard Set(list.map(\.id)).count == list.count else { throw ClientError.invalidRequest("duplicate activity ids in the import") }
        try write(
            list.map {
                LocalChange(
                    record: .activity($0),
                    type: .activity,
                    recordID: recordID(activity: $0.id),
                    category: $0.category,
                    conflictIfLive: "activity '\($0.id)' exists"
                )
            }
        )
    }

    /// Adds or replaces `activities` and appends each outcome's values (and its note, when it has one) to
    /// the outcome of its occurrence, all in one local transaction: one invalid item writes nothing.
    /// Returns how many activities were new.
    @discardableResult
    public func importCare(activities: [Activity], outcomes: [Outcome]) throws -> Int {
        for a in activities { try Self.validate(a, "invalid activity") }
        let date = Date(unixMillis: now().unixMillis)
        var byID: [String: Activity] = [:]
        var changes: [LocalChange] = []
        var added = 0
        for var a in activities {
            if let old = try byID[a.id] ?? activity(id: a.id) {
                guard old.category == a.category else { throw ClientError.invalidRequest("an activity cannot change category; remove and add it") }
                a.createdAt = old.createdAt
                a.updatedAt = date
            } else {
                added += 1
            }
            byID[a.id] = a
            changes.append(LocalChange(record: .activity(a), type: .activity, recordID: recordID(activity: a.id), category: a.category))
        }
        var merged: [RecordID: (outcome: Outcome, category: String)] = [:]
        var order: [RecordID] = []
        for o in outcomes {
            guard let category = try (byID[o.activityID] ?? activity(id: o.activityID))?.category else {
                throw ClientError.notFound("no activity '\(o.activityID)'")
            }
            let id = recordID(outcome: o.activityID, o.occurrence)
            var outcome =
                try merged[id]?.outcome ?? self.outcome(activityID: o.activityID, occurrence: o.occurrence)
                ?? Outcome(activityID: o.activityID, occurrence: o.occurrence, createdAt: date)
            outcome.values += o.values
            if let note = o.note { outcome.note = note }
            outcome.updatedAt = date
            do { try outcome.validate() } catch { throw ClientError.invalidRequest("invalid outcome: \(error)") }
            if merged[id] == nil { order.append(id) }
            merged[id] = (outcome, category)
        }
        changes += order.compactMap { id in
            merged[id].map { LocalChange(record: .outcome($0.outcome), type: .outcome, recordID: id, category: $0.category) }
        }
        try write(changes)
        return added
    }

    /// Replaces an activity (same id; its category cannot change, that would move it to another tresor).
    public func updateActivity(_ activity: Activity) throws {
        try Self.validate(activity, "invalid activity")
        guard let old = try self.activity(id: activity.id) else { throw ClientError.notFound("no activity '\(activity.id)'") }
        guard old.category == activity.category else {
            throw ClientError.invalidRequest("an activity cannot change category; remove and add it")
        }
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
        var outcome =
            try self.outcome(activityID: activityID, occurrence: occurrence)
            ?? Outcome(activityID: activityID, occurrence: occurrence, values: [], createdAt: date, updatedAt: date)
        outcome.values.append(value)
        if let note { outcome.note = note }
        outcome.updatedAt = date
        do { try outcome.validate() } catch { throw ClientError.invalidRequest("invalid outcome: \(error)") }
        try write(.outcome(outcome), type: .outcome, recordID: recordID(outcome: activityID, occurrence), category: activity.category)
        return outcome
    }

    /// An invalid activity as the request error callers see, prefixed with `what`.
    static func validate(_ activity: Activity, _ what: String) throws {
        do { try activity.validate() } catch { throw ClientError.invalidRequest("\(what): \(error)") }
    }

    func recordID(activity id: String) -> RecordID {
        RecordID.make(type: .activity, activityID: id, occurrence: nil, key: account.identity.recordIDKey)
    }

    func recordID(outcome id: String, _ occurrence: Int) -> RecordID {
        RecordID.make(type: .outcome, activityID: id, occurrence: occurrence, key: account.identity.recordIDKey)
    }

    // MARK: Reading care data (decrypted in memory)

    func open(_ row: LocalRecordRow) throws -> CareRecord? {
        guard let t = keyring[row.category] else { throw ClientError.integrity("no keys for category \(row.category)") }
        do {
            return try row.envelope.openRecord(
                keys: t.keys,
                authorKey: account.certificate.signingKey,
                expecting: EnvelopeContext(ownerID: me, tresorID: t.id, category: row.category)
            ).record
        } catch { throw ClientError.from(error) }
    }

    /// The live record `id` decrypted, or nil when the device holds none (or only its tombstone).
    func liveRecord(_ id: RecordID) throws -> CareRecord? {
        guard let row = try store.record(id), !row.deleted else { return nil }
        return try open(row)
    }

    /// The live records of `type` (optionally of one category), decrypted.
    func liveRecords(category: String?, type: RecordType) throws -> [CareRecord] {
        try store.records(category: category, type: type).filter { !$0.deleted }.compactMap(open)
    }

    /// The category the activity `id` has on this device, live or removed: the only one it can be written
    /// in again (Docs/design.md §4). Nil when the device never held it.
    public func category(ofActivity id: String) throws -> String? {
        try store.record(recordID(activity: id))?.category
    }

    /// Activities, optionally of one category, sorted by id.
    public func activities(category: String? = nil) throws -> [Activity] {
        try liveRecords(category: category, type: .activity).compactMap(\.asActivity).sorted { $0.id < $1.id }
    }

    /// The activity `id`, or nil when there is none (or it was removed).
    public func activity(id: String) throws -> Activity? {
        try liveRecord(recordID(activity: id))?.asActivity
    }

    func outcome(activityID: String, occurrence: Int) throws -> Outcome? {
        try liveRecord(recordID(outcome: activityID, occurrence))?.asOutcome
    }

    /// Outcomes, optionally of one activity and of occurrences starting within [from, to).
    public func outcomes(activityID: String? = nil, category: String? = nil, from: Date? = nil, to: Date? = nil) throws -> [Outcome] {
        let all = try liveRecords(category: category, type: .outcome).compactMap(\.asOutcome)
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
}

extension CareRecord {
    /// The activity this record holds, if it is one.
    var asActivity: Activity? {
        if case let .activity(a) = self { return a }
        return nil
    }

    /// The outcome this record holds, if it is one.
    var asOutcome: Outcome? {
        if case let .outcome(o) = self { return o }
        return nil
    }
}
