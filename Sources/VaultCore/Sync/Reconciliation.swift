import Foundation

/// One version of a record as sync sees it: its HLC timestamp, whether it is a delete, and its body.
public struct Versioned<Payload> {
    /// The version's hybrid logical clock timestamp (includes the device id).
    public var timestamp: HLCTimestamp
    /// True for a tombstone.
    public var deleted: Bool
    /// The record; nil exactly when `deleted`.
    public var payload: Payload?

    /// A version from its parts; a deleted version never keeps a payload, so its payload is dropped.
    public init(timestamp: HLCTimestamp, deleted: Bool, payload: Payload?) {
        self.timestamp = timestamp
        self.deleted = deleted
        self.payload = deleted ? nil : payload
    }

    /// A live version carrying `payload`.
    public init(timestamp: HLCTimestamp, payload: Payload) {
        self.init(timestamp: timestamp, deleted: false, payload: payload)
    }

    /// A tombstone at `timestamp`.
    public static func tombstone(at timestamp: HLCTimestamp) -> Versioned {
        Versioned(timestamp: timestamp, deleted: true, payload: nil)
    }
}

extension Versioned: Sendable where Payload: Sendable {}
extension Versioned: Equatable where Payload: Equatable {}
extension Versioned: Hashable where Payload: Hashable {}
extension Versioned: Codable where Payload: Codable {}

/// The conflict rules of sync (Docs/design.md §5). Pure functions, so every device and the server reach the
/// same state from the same versions, in whatever order they arrive.
public enum Reconciliation {
    /// Last writer wins: the version with the greater timestamp (whose order already breaks ties by
    /// device id). On an exact timestamp tie a tombstone wins, so a replayed live copy cannot undo a
    /// delete; this matches the server's head rule. A device never issues one timestamp twice, so two
    /// versions equal in timestamp and `deleted` are the same version, and `a` is returned.
    public static func winner<T>(_ a: Versioned<T>, _ b: Versioned<T>) -> Versioned<T> {
        if a.timestamp != b.timestamp { return a.timestamp > b.timestamp ? a : b }
        if a.deleted != b.deleted { return a.deleted ? a : b }
        return a
    }

    /// Merges two concurrent copies of one outcome so no device's readings are lost:
    /// - values: the union by value id; when one id has different content, the copy with the later
    ///   `createdAt` (whole milliseconds) wins, ties by the content bytes (Docs/envelope-v1.md §8.3); ids in
    ///   either tombstone set are dropped;
    /// - removedValueIDs: the union (tombstones are never forgotten);
    /// - note: the note of the copy with the later `updatedAt`, ties by the note itself (nil lowest);
    /// - createdAt: the earlier; updatedAt: the later.
    ///
    /// Every field is a maximum, minimum or union under a total order, so the merge is commutative,
    /// associative and idempotent, and the result's values come out sorted by (createdAt, id).
    /// Both copies should share `activityID` and `occurrence`; if they do not, the smaller key is kept so
    /// the result still does not depend on argument order.
    public static func mergeOutcomes(_ a: Outcome, _ b: Outcome) -> Outcome {
        let removed = a.removedValueIDs.union(b.removedValueIDs)

        var byID: [String: OutcomeValue] = [:]
        for value in a.values + b.values where !removed.contains(value.id) {
            if let held = byID[value.id], !OutcomeValue.conflictLoses(held, to: value) { continue }
            byID[value.id] = value
        }
        let values = byID.values.sorted(by: OutcomeValue.canonicallyPrecedes)

        let noteSource = noteOrder(a, b) ? b : a
        let keySource = (a.activityID, a.occurrence) <= (b.activityID, b.occurrence) ? a : b
        return Outcome(
            activityID: keySource.activityID,
            occurrence: keySource.occurrence,
            values: values,
            removedValueIDs: removed,
            note: noteSource.note,
            createdAt: min(a.createdAt, b.createdAt),
            updatedAt: max(a.updatedAt, b.updatedAt)
        )
    }

    /// True when `a`'s note ranks below `b`'s: by updatedAt, then by the note (nil lowest).
    private static func noteOrder(_ a: Outcome, _ b: Outcome) -> Bool {
        if a.updatedAt != b.updatedAt { return a.updatedAt < b.updatedAt }
        switch (a.note, b.note) {
        case let (x?, y?): return x < y
        case (nil, _?): return true
        default: return false
        }
    }
}

extension OutcomeValue {
    /// True when `held` loses to `other`, a copy of the same id: the later `createdAt` in whole
    /// milliseconds wins, then the greater content bytes (Docs/envelope-v1.md §8.3). Copies with equal
    /// content do not lose to each other. (Deliberately not `==` first: 0.0 and -0.0, or two spellings of
    /// one Unicode string, are `==` yet encode differently, and the bytes must decide or the result would
    /// depend on argument order.)
    static func conflictLoses(_ held: OutcomeValue, to other: OutcomeValue) -> Bool {
        let (mh, mo) = (millis(held.createdAt), millis(other.createdAt))
        if mh != mo { return mh < mo }
        return held.content.lexicographicallyPrecedes(other.content)
    }
}

/// What a device holds of one record when a version of it arrives from the server.
public struct LocalCopy: Sendable, Equatable {
    /// The local version's timestamp.
    public var timestamp: HLCTimestamp
    /// True when the local version is a tombstone.
    public var deleted: Bool
    /// True when the local version waits in the outbox (not yet acknowledged by the server).
    public var pending: Bool
    /// The local outcome, when the record is a live outcome (needed to merge values); nil otherwise.
    public var outcome: Outcome?

    public init(timestamp: HLCTimestamp, deleted: Bool, pending: Bool, outcome: Outcome? = nil) {
        self.timestamp = timestamp
        self.deleted = deleted
        self.pending = pending
        self.outcome = deleted ? nil : outcome
    }
}

/// What a device does with a pulled version of a record (Docs/design.md §5).
public enum Resolution: Sendable, Equatable {
    /// Store the server's version as the local copy; when `dropOutbox`, the unsent local version lost and
    /// leaves the outbox.
    case adoptRemote(dropOutbox: Bool)
    /// Keep the local copy; only note that the server now holds the pulled version.
    case keepLocal
    /// Write `merged` as a new local version (sent at the next push): the pulled and the local copy of
    /// an outcome each held readings the other lacked.
    case writeMerged(Outcome)
}

extension Reconciliation {
    /// The decision for one pulled version `remote` (its outcome in `remoteOutcome` when it is a live
    /// outcome) against the device's copy `local` (nil when the device has none):
    /// - no local copy: adopt the remote version;
    /// - the same timestamp: the same version, keep it;
    /// - two live outcomes: merge the value sets; adopt the remote copy when it is newer and already
    ///   holds everything, keep the local one when it is newer and holds everything, else write the merge;
    /// - otherwise last writer wins (`winner`).
    public static func resolve(local: LocalCopy?, remote: Versioned<Outcome>) -> Resolution {
        guard let local else { return .adoptRemote(dropOutbox: false) }
        if remote.timestamp == local.timestamp { return .keepLocal }
        if let mine = local.outcome, let theirs = remote.payload {
            let merged = mergeOutcomes(mine, theirs)
            let remoteNewer = remote.timestamp > local.timestamp
            if remoteNewer && sameContent(merged, theirs) { return .adoptRemote(dropOutbox: local.pending) }
            if !remoteNewer && sameContent(merged, mine) { return .keepLocal }
            return .writeMerged(merged)
        }
        let mine = Versioned<Outcome>(timestamp: local.timestamp, deleted: local.deleted, payload: nil)
        let bare = Versioned<Outcome>(timestamp: remote.timestamp, deleted: remote.deleted, payload: nil)
        return winner(bare, mine).timestamp == remote.timestamp ? .adoptRemote(dropOutbox: local.pending) : .keepLocal
    }

    /// True when two copies of an outcome hold the same readings, tombstones and note (timestamps aside).
    public static func sameContent(_ a: Outcome, _ b: Outcome) -> Bool {
        Set(a.values) == Set(b.values) && a.removedValueIDs == b.removedValueIDs && a.note == b.note
    }
}
