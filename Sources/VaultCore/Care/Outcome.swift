import Foundation

/// What was done for one occurrence of an activity (after CareKit's `OCKOutcome`). Its natural key is
/// (`activityID`, `occurrence`), so all devices write one record per occurrence, and concurrent copies are
/// merged value by value (`Reconciliation.mergeOutcomes`) instead of one overwriting the other.
public struct Outcome: Codable, Sendable, Hashable {
    /// The largest accepted occurrence index. Hourly events over the whole supported date range (4,000
    /// years) number about 35 million per schedule element, so a billion leaves room for any real plan
    /// while keeping every index arithmetic (index × step × 7 days) far from overflow.
    public static let maxOccurrence = 1_000_000_000

    /// The id of the activity this outcome is for.
    public var activityID: String
    /// The occurrence index of the schedule event (`ScheduleEvent.occurrence`), 0 or more.
    public var occurrence: Int
    /// The recorded values, including any that are tombstoned; read `liveValues` for what to show.
    public var values: [OutcomeValue]
    /// Ids of values deleted on some device. Kept forever, so a merge with an older copy that still
    /// carries such a value never brings it back.
    public var removedValueIDs: Set<String>
    /// A free-text note about the occurrence.
    public var note: String?
    /// When the outcome was first recorded.
    public var createdAt: Date
    /// When it was last changed; the note of the later copy wins a merge.
    public var updatedAt: Date

    /// Makes an outcome; `updatedAt` defaults to `createdAt`. Call `validate()` for user input.
    public init(
        activityID: String,
        occurrence: Int,
        values: [OutcomeValue] = [],
        removedValueIDs: Set<String> = [],
        note: String? = nil,
        createdAt: Date,
        updatedAt: Date? = nil
    ) {
        self.activityID = activityID
        self.occurrence = occurrence
        self.values = values
        self.removedValueIDs = removedValueIDs
        self.note = note
        self.createdAt = createdAt
        self.updatedAt = updatedAt ?? createdAt
    }

    /// The values that are not tombstoned, in a deterministic order (by `createdAt`, then id).
    public var liveValues: [OutcomeValue] {
        values.filter { !removedValueIDs.contains($0.id) }.sorted(by: OutcomeValue.canonicallyPrecedes)
    }

    /// Deletes a value: drops it and records a tombstone so merges cannot resurrect it.
    public mutating func removeValue(id: String, at date: Date) {
        values.removeAll { $0.id == id }
        removedValueIDs.insert(id)
        updatedAt = max(updatedAt, date)
    }

    /// Checks the activity id, the occurrence, and every value (valid, no two with one id).
    public func validate() throws(CareModelError) {
        try Activity.validateID(activityID)
        guard occurrence >= 0 else { throw .negativeOccurrence(occurrence) }
        guard occurrence <= Self.maxOccurrence else { throw .occurrenceTooLarge(occurrence) }
        var seen = Set<String>()
        for value in values {
            try value.validate()
            guard seen.insert(value.id).inserted else { throw .duplicateValueID }
        }
    }

    private enum CodingKeys: String, CodingKey {
        case activityID, occurrence, values, removedValueIDs, note, createdAt, updatedAt
    }

    /// Decodes an outcome, giving absent fields the defaults of Docs/payload-v1.md §4: no values, no
    /// removed value ids, and `createdAt` and `updatedAt` each defaulting to the other (both absent:
    /// 1970-01-01). `activityID` and `occurrence` stay required.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        activityID = try c.decode(String.self, forKey: .activityID)
        occurrence = try c.decode(Int.self, forKey: .occurrence)
        values = try c.decodeIfPresent([OutcomeValue].self, forKey: .values) ?? []
        removedValueIDs = try c.decodeIfPresent(Set<String>.self, forKey: .removedValueIDs) ?? []
        note = try c.decodeIfPresent(String.self, forKey: .note)
        (createdAt, updatedAt) = try Activity.decodeDates(c, created: .createdAt, updated: .updatedAt)
    }

    /// Encodes with the tombstone set sorted: a `Set` has no stable order, and one outcome should have one
    /// spelling.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(activityID, forKey: .activityID)
        try c.encode(occurrence, forKey: .occurrence)
        try c.encode(values, forKey: .values)
        try c.encode(removedValueIDs.sorted(), forKey: .removedValueIDs)
        try c.encodeIfPresent(note, forKey: .note)
        try c.encode(createdAt, forKey: .createdAt)
        try c.encode(updatedAt, forKey: .updatedAt)
    }
}
