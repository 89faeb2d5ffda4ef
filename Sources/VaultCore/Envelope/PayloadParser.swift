import Foundation

/// A direct reader of the payload JSON (Docs/payload-v1.md) for the forms writers produce: a tombstone or an
/// outcome, strings without escapes, plain numbers. Foundation's `JSONDecoder` spends more per outcome than
/// the decryption does (Docs/benchmarks.md §3), most of it in generic container machinery.
///
/// It gives up, returning nil, on anything it does not handle itself: an activity, an escape or a control
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
            default:
                return nil
            }
        }
        guard !s.failed, let type else { return nil }
        var payload = RecordPayload(type: type)
        payload.outcome = outcome
        return payload
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
        let epoch = Date(timeIntervalSince1970: 0)
        return Outcome(
            activityID: activityID,
            occurrence: occurrence,
            values: values,
            removedValueIDs: removed,
            note: note,
            createdAt: created ?? updated ?? epoch,
            updatedAt: updated ?? created ?? epoch
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
