import Foundation

/// Why a care-model value (activity, schedule, outcome, outcome value) was rejected. Each case names the
/// check that failed. Cases carry lengths and counts but never the offending text, because ids and
/// titles can be health data and errors end up in terminals and logs.
public enum CareModelError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An activity id (or an outcome's activity id) is empty.
    case emptyID
    /// An id is longer than `Activity.maxIDLength` characters.
    case idTooLong(length: Int)
    /// An id contains a control character (Unicode general category Cc).
    case idContainsControlCharacter
    /// A title is empty or only whitespace.
    case emptyTitle
    /// A category is empty.
    case emptyCategory
    /// A category is longer than `Activity.maxCategoryLength` characters.
    case categoryTooLong(length: Int)
    /// A category contains something other than lowercase a-z, 0-9 and '-'.
    case invalidCategoryCharacter
    /// An outcome value's id is empty, too long or contains a control character.
    case invalidValueID
    /// One outcome lists two values with the same id.
    case duplicateValueID
    /// A number value is NaN or infinite.
    case nonFiniteNumber
    /// An outcome's occurrence index is negative.
    case negativeOccurrence(Int)
    /// An outcome's occurrence index is above `Outcome.maxOccurrence`.
    case occurrenceTooLarge(Int)
    /// A schedule interval is below 1 or above `ScheduleInterval.maxCount`.
    case invalidInterval(ScheduleInterval)
    /// An all-day element steps by hours; all-day events need a day or week interval.
    case allDayRequiresDayInterval
    /// An element's duration is negative or not finite.
    case invalidDuration
    /// An element's end lies before its start.
    case endBeforeStart
    /// A date is not finite or lies outside `Date.distantPast ... Date.distantFuture`.
    case dateOutOfRange
    /// A time-zone identifier is not known to this system.
    case unknownTimeZone(String)
    /// A time of day is missing its hour or is out of range (hour 0-23, minute 0-59, second 0-59).
    case invalidTimeOfDay
    /// A weekday is outside 1 (Sunday) ... 7 (Saturday).
    case invalidWeekday(Int)
    /// A builder was given no times or no weekdays.
    case emptySchedule
    /// A query range has `from` after `to`.
    case invalidRange
    /// A query would produce `count` events, more than `limit` (`Schedule.maxEventsPerCall`).
    case tooManyEvents(count: Int, limit: Int)

    /// Plain words for a person: what is wrong and what is allowed. Never the offending text itself.
    public var description: String {
        switch self {
        case .emptyID: "the activity id is empty"
        case let .idTooLong(length): "the id is \(length) characters long; at most \(Activity.maxIDLength) are allowed"
        case .idContainsControlCharacter: "the id contains a control character"
        case .emptyTitle: "the title is empty"
        case .emptyCategory: "the category is empty"
        case let .categoryTooLong(length):
            "the category is \(length) characters long; at most \(Activity.maxCategoryLength) are allowed"
        case .invalidCategoryCharacter: "a category may only hold lowercase letters a-z, digits 0-9 and '-'"
        case .invalidValueID: "a value id is empty, too long or contains a control character"
        case .duplicateValueID: "two values of one outcome share an id"
        case .nonFiniteNumber: "a number value is not a finite number"
        case let .negativeOccurrence(n): "occurrence \(n) is negative; occurrences count from 0"
        case let .occurrenceTooLarge(n): "occurrence \(n) is too large; at most \(Outcome.maxOccurrence) is allowed"
        case let .invalidInterval(interval):
            "a schedule step of \(interval.count) is out of range; use 1 to \(ScheduleInterval.maxCount)"
        case .allDayRequiresDayInterval: "an all-day schedule must repeat by days or weeks, not hours"
        case .invalidDuration: "the duration must be a finite, non-negative number of seconds"
        case .endBeforeStart: "the schedule ends before it starts"
        case .dateOutOfRange: "a date is outside the years 0001 to 4000"
        case .unknownTimeZone: "the time zone is not known (use an identifier such as Europe/Berlin)"
        case .invalidTimeOfDay: "a time of day must be HH:MM (hour 0-23, minute 0-59)"
        case let .invalidWeekday(day): "weekday \(day) does not exist (1 = Sunday ... 7 = Saturday)"
        case .emptySchedule: "the schedule names no times or no weekdays"
        case .invalidRange: "the start of the range is after its end"
        case let .tooManyEvents(count, limit):
            "the range holds \(count) scheduled events, more than \(limit) at once; ask for a shorter range"
        }
    }
}

/// A care-plan activity (after CareKit's `OCKTask`): what the patient should do and on what schedule.
/// Its `id` is the natural key the user chose (e.g. "walk"): the stable record id is derived from it,
/// so two devices that create the same activity offline end up with one record, not two.
public struct Activity: Codable, Sendable, Hashable {
    /// The longest accepted id, in characters.
    public static let maxIDLength = 128
    /// The longest accepted category, in characters (also the envelope header's limit).
    public static let maxCategoryLength = 64

    /// The natural key chosen by the user, e.g. "walk": 1-128 characters, no control characters.
    public var id: String
    /// What the user sees, e.g. "Evening walk".
    public var title: String
    /// How to do it, e.g. "30 minutes at a brisk pace".
    public var instructions: String?
    /// The tresor category this activity belongs to, e.g. "interventions": 1-64 of a-z, 0-9, '-'.
    public var category: String
    /// When the activity is due.
    public var schedule: Schedule
    /// What a complete outcome looks like, e.g. a number of steps; may be empty.
    public var targetValues: [OutcomeValue]
    /// The care plan this activity belongs to, if any.
    public var carePlanID: String?
    /// Free-form extra fields, for integrations that need them.
    public var userInfo: [String: String]
    /// When the activity was first made.
    public var createdAt: Date
    /// When it was last changed.
    public var updatedAt: Date

    /// Makes a validated activity; `updatedAt` defaults to `createdAt`. Throws the first failed check.
    public init(
        id: String,
        title: String,
        instructions: String? = nil,
        category: String,
        schedule: Schedule,
        targetValues: [OutcomeValue] = [],
        carePlanID: String? = nil,
        userInfo: [String: String] = [:],
        createdAt: Date,
        updatedAt: Date? = nil
    ) throws(CareModelError) {
        self.init(
            decoded: id,
            title: title,
            instructions: instructions,
            category: category,
            schedule: schedule,
            targetValues: targetValues,
            carePlanID: carePlanID,
            userInfo: userInfo,
            createdAt: createdAt,
            updatedAt: updatedAt ?? createdAt
        )
        try validate()
    }

    /// Checks id, title, category, schedule and target values. Decoding does not validate (a newer client
    /// may relax a rule), so callers validate what users type and schedules re-check before computing.
    public func validate() throws(CareModelError) {
        try Activity.validateID(id)
        guard !title.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { throw .emptyTitle }
        try Activity.validateCategory(category)
        try schedule.validate()
        for value in targetValues { try value.validate() }
    }

    /// Checks an activity id: 1-128 characters and no control characters.
    public static func validateID(_ id: String) throws(CareModelError) {
        guard !id.isEmpty else { throw .emptyID }
        let length = id.count
        guard length <= maxIDLength else { throw .idTooLong(length: length) }
        guard !containsControlCharacter(id) else { throw .idContainsControlCharacter }
    }

    /// Checks a category: 1-64 characters of lowercase a-z, 0-9 and '-', the same alphabet as tresor names.
    public static func validateCategory(_ category: String) throws(CareModelError) {
        guard !category.isEmpty else { throw .emptyCategory }
        // Counted in UTF-8 bytes, which equals characters for the allowed ASCII alphabet; a non-ASCII
        // category fails the character check below anyway.
        let length = category.utf8.count
        guard length <= maxCategoryLength else { throw .categoryTooLong(length: length) }
        let allowed = category.utf8.allSatisfy { b in
            (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || b == UInt8(ascii: "-")
        }
        guard allowed else { throw .invalidCategoryCharacter }
    }

    /// True when `s` holds a C0/C1 control character (general category Cc): those hide in terminals and
    /// logs and can make two different ids look the same.
    /// Cc is exactly U+0000-U+001F and U+007F-U+009F, and the Unicode stability policy keeps it so; those
    /// ranges are compared on the UTF-8 bytes, without the property lookup per scalar (a doctor's pull
    /// checks every outcome's strings). C1 controls are encoded 0xC2 0x80-0x9F.
    static func containsControlCharacter(_ s: String) -> Bool {
        var afterC2 = false
        for b in s.utf8 {
            if b < 0x20 || b == 0x7F || (afterC2 && b <= 0x9F) { return true }
            afterC2 = b == 0xC2
        }
        return false
    }
}
