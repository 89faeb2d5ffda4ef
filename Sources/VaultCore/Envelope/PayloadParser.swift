import Foundation

/// A direct reader of the payload JSON (Docs/payload-v1.md) for the forms writers produce: a tombstone, an
/// outcome or an activity (with its schedule), strings without escapes, plain numbers. Foundation's
/// `JSONDecoder` spends more per record than the decryption does (Docs/benchmarks.md §3), most of it in
/// generic container machinery.
///
/// It gives up, returning nil, on anything it does not handle itself: an escape or a control
/// character in a string, a key it does not know, a key given twice, a `null`, an integer with a fraction or
/// an exponent, a number that is not finite, text that is not UTF-8. The caller then decodes with
/// `JSONDecoder`, which decides. So for every input the result is either exactly what `JSONDecoder` yields
/// or nil, never a different record: `PayloadParserTests` and the payload fuzz target check that.
enum PayloadParser {
    /// The payload, or nil when the input is beyond this reader (not necessarily invalid).
    static func decode(_ input: [UInt8]) -> RecordPayload? {
        input.withUnsafeBufferPointer { buffer in
            var s = JSONScanner(buffer)
            guard let payload = payload(&s), s.atEnd() else { return nil }
            return payload
        }
    }

    // MARK: The payload's shapes

    private static func payload(_ s: inout JSONScanner) -> RecordPayload? {
        var type: RecordType?
        var activity: Activity?
        var outcome: Outcome?
        var seen: UInt8 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "type":
                guard s.mark(&seen, 1), let text = s.string(), let t = RecordType(rawValue: text) else { return nil }
                type = t
            case "outcome":
                guard s.mark(&seen, 2), let o = Self.outcome(&s) else { return nil }
                outcome = o
            case "activity":
                guard s.mark(&seen, 4), let a = Self.activity(&s) else { return nil }
                activity = a
            default:
                return nil
            }
        }
        guard !s.failed, let type else { return nil }
        var payload = RecordPayload(type: type)
        payload.activity = activity
        payload.outcome = outcome
        return payload
    }

    /// As `Activity.init(from:)` reads it: `id`, `title` and `category` required, the defaults of
    /// Docs/payload-v1.md §2 for the rest.
    private static func activity(_ s: inout JSONScanner) -> Activity? {
        var id: String?
        var title: String?
        var instructions: String?
        var category: String?
        var schedule: Schedule?
        var targets: [OutcomeValue] = []
        var carePlanID: String?
        var userInfo: [String: String] = [:]
        var created: Date?
        var updated: Date?
        var seen: UInt16 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "id":
                guard s.mark(&seen, 1), let text = s.string() else { return nil }
                id = text
            case "title":
                guard s.mark(&seen, 2), let text = s.string() else { return nil }
                title = text
            case "instructions":
                guard s.mark(&seen, 4), let text = s.string() else { return nil }
                instructions = text
            case "category":
                guard s.mark(&seen, 8), let text = s.string() else { return nil }
                category = text
            case "schedule":
                guard s.mark(&seen, 16), let sc = Self.schedule(&s) else { return nil }
                schedule = sc
            case "targetValues":
                guard s.mark(&seen, 32), let v = s.array({ value(&$0) }) else { return nil }
                targets = v
            case "carePlanID":
                guard s.mark(&seen, 64), let text = s.string() else { return nil }
                carePlanID = text
            case "userInfo":
                guard s.mark(&seen, 128), let info = Self.strings(&s) else { return nil }
                userInfo = info
            case "createdAt":
                guard s.mark(&seen, 256), let d = s.date() else { return nil }
                created = d
            case "updatedAt":
                guard s.mark(&seen, 512), let d = s.date() else { return nil }
                updated = d
            default:
                return nil
            }
        }
        guard !s.failed, let id, let title, let category else { return nil }
        let (createdAt, updatedAt) = Activity.resolvedDates(created: created, updated: updated)
        return Activity(
            decoded: id,
            title: title,
            instructions: instructions,
            category: category,
            schedule: schedule ?? Schedule(elements: []),
            targetValues: targets,
            carePlanID: carePlanID,
            userInfo: userInfo,
            createdAt: createdAt,
            updatedAt: updatedAt
        )
    }

    /// An object of strings. Two keys Swift takes for one (the same text, or canonically equivalent text)
    /// are left to `JSONDecoder`.
    private static func strings(_ s: inout JSONScanner) -> [String: String]? {
        var out: [String: String] = [:]
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            guard let text = s.string(), out.updateValue(text, forKey: key) == nil else { return nil }
        }
        return s.failed ? nil : out
    }

    /// `{"elements":[…]}`, the synthesized form: `elements` required.
    private static func schedule(_ s: inout JSONScanner) -> Schedule? {
        var elements: [ScheduleElement]?
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            guard key == "elements", elements == nil, let e = s.array({ element(&$0) }) else { return nil }
            elements = e
        }
        guard !s.failed, let elements else { return nil }
        return Schedule(elements: elements)
    }

    /// As `ScheduleElement.init(from:)` reads it: `start` and `interval` required, the defaults of
    /// Docs/payload-v1.md §3 for the rest; not validated (as with `JSONDecoder`).
    private static func element(_ s: inout JSONScanner) -> ScheduleElement? {
        var start: Date?
        var end: Date?
        var interval: ScheduleInterval?
        var allDay = false
        var duration: TimeInterval = 0
        var text: String?
        var targets: [OutcomeValue] = []
        var zone = ScheduleElement.defaultTimeZoneIdentifier
        var seen: UInt8 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "start":
                guard s.mark(&seen, 1), let d = s.date() else { return nil }
                start = d
            case "end":
                guard s.mark(&seen, 2), let d = s.date() else { return nil }
                end = d
            case "interval":
                guard s.mark(&seen, 4), let i = Self.interval(&s) else { return nil }
                interval = i
            case "allDay":
                guard s.mark(&seen, 8), let b = s.bool() else { return nil }
                allDay = b
            case "duration":
                guard s.mark(&seen, 16), let d = s.double() else { return nil }
                duration = d
            case "text":
                guard s.mark(&seen, 32), let t = s.string() else { return nil }
                text = t
            case "targetValues":
                guard s.mark(&seen, 64), let v = s.array({ value(&$0) }) else { return nil }
                targets = v
            case "timeZoneIdentifier":
                guard s.mark(&seen, 128), let z = s.string() else { return nil }
                zone = z
            default:
                return nil
            }
        }
        guard !s.failed, let start, let interval else { return nil }
        return ScheduleElement(
            decoded: start,
            end: end,
            interval: interval,
            allDay: allDay,
            duration: duration,
            text: text,
            targetValues: targets,
            timeZoneIdentifier: zone
        )
    }

    /// `{"unit":"days","count":1}`: a count out of 1...`ScheduleInterval.maxCount` or another unit is left
    /// to `JSONDecoder` (which refuses both).
    private static func interval(_ s: inout JSONScanner) -> ScheduleInterval? {
        var unit: String?
        var count: Int?
        var seen: UInt8 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "unit":
                guard s.mark(&seen, 1), let u = s.string() else { return nil }
                unit = u
            case "count":
                guard s.mark(&seen, 2), let n = s.integer() else { return nil }
                count = n
            default:
                return nil
            }
        }
        guard !s.failed, let unit, let count, let interval = ScheduleInterval.named(unit, count: count), (try? interval.validate()) != nil else {
            return nil
        }
        return interval
    }

    private static func outcome(_ s: inout JSONScanner) -> Outcome? {
        var activityID: String?
        var occurrence: Int?
        var values: [OutcomeValue] = []
        var removed: Set<String> = []
        var note: String?
        var created: Date?
        var updated: Date?
        var seen: UInt8 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "activityID":
                guard s.mark(&seen, 1), let text = s.string() else { return nil }
                activityID = text
            case "occurrence":
                guard s.mark(&seen, 2), let n = s.integer() else { return nil }
                occurrence = n
            case "values":
                guard s.mark(&seen, 4), let v = s.array({ value(&$0) }) else { return nil }
                values = v
            case "removedValueIDs":
                guard s.mark(&seen, 8), let ids = s.array({ $0.string() }) else { return nil }
                removed = Set(ids)
            case "note":
                guard s.mark(&seen, 16), let text = s.string() else { return nil }
                note = text
            case "createdAt":
                guard s.mark(&seen, 32), let d = s.date() else { return nil }
                created = d
            case "updatedAt":
                guard s.mark(&seen, 64), let d = s.date() else { return nil }
                updated = d
            default:
                return nil
            }
        }
        guard !s.failed, let activityID, let occurrence else { return nil }
        // The defaults of Outcome.init(from:): each date falls back to the other, both to 1970-01-01.
        let (createdAt, updatedAt) = Activity.resolvedDates(created: created, updated: updated)
        return Outcome(
            activityID: activityID,
            occurrence: occurrence,
            values: values,
            removedValueIDs: removed,
            note: note,
            createdAt: createdAt,
            updatedAt: updatedAt
        )
    }

    private static func value(_ s: inout JSONScanner) -> OutcomeValue? {
        var id: String?
        var value: OutcomeValue.Value?
        var units: String?
        var kind: String?
        var created: Date?
        var seen: UInt8 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "id":
                guard s.mark(&seen, 1), let text = s.string() else { return nil }
                id = text
            case "value":
                guard s.mark(&seen, 2), let v = tagged(&s) else { return nil }
                value = v
            case "units":
                guard s.mark(&seen, 4), let text = s.string() else { return nil }
                units = text
            case "kind":
                guard s.mark(&seen, 8), let text = s.string() else { return nil }
                kind = text
            case "createdAt":
                guard s.mark(&seen, 16), let d = s.date() else { return nil }
                created = d
            default:
                return nil
            }
        }
        guard !s.failed, let value else { return nil }
        // The defaults of OutcomeValue.init(from:).
        let createdAt = created ?? Date(timeIntervalSince1970: 0)
        let resolvedID = id ?? OutcomeValue.derivedID(value: value, units: units, kind: kind, createdAt: createdAt)
        return OutcomeValue(id: resolvedID, value: value, units: units, kind: kind, createdAt: createdAt)
    }

    /// `{"type":"number","number":3.5}` and its text and boolean forms. Every field present is read and
    /// must have its own type; the one the tag names must be there.
    private static func tagged(_ s: inout JSONScanner) -> OutcomeValue.Value? {
        var tag: String?
        var number: Double?
        var text: String?
        var boolean: Bool?
        var seen: UInt8 = 0
        var first = true
        guard s.openObject() else { return nil }
        while let key = s.nextKey(&first) {
            switch key {
            case "type":
                guard s.mark(&seen, 1), let t = s.string() else { return nil }
                tag = t
            case "number":
                guard s.mark(&seen, 2), let n = s.double() else { return nil }
                number = n
            case "text":
                guard s.mark(&seen, 4), let t = s.string() else { return nil }
                text = t
            case "boolean":
                guard s.mark(&seen, 8), let b = s.bool() else { return nil }
                boolean = b
            default:
                return nil
            }
        }
        guard !s.failed else { return nil }
        switch tag {
        case "number": return number.map { .number($0) }
        case "text": return text.map { .text($0) }
        case "boolean": return boolean.map { .boolean($0) }
        default: return nil
        }
    }
}
