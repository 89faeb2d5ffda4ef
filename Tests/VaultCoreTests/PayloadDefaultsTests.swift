import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// Payloads written by another client that leaves out fields with a documented default still open, to
/// the same record on every device (Docs/payload-v1.md); fields without a default still refuse it.
@Suite("Payload defaults")
struct PayloadDefaultsTests {
    static let day = Date(unixMillis: 1_700_000_000_000)
    static let later = Date(unixMillis: 1_700_000_100_000)

    static func activity() throws -> Activity {
        let element = try ScheduleElement(
            start: day,
            interval: .days(1),
            targetValues: [OutcomeValue(id: "t", value: .number(1), createdAt: day)],
            timeZoneIdentifier: "Europe/Berlin"
        )
        return try Activity(
            id: "walk",
            title: "Walk",
            category: "interventions",
            schedule: Schedule(elements: [element]),
            targetValues: [OutcomeValue(id: "goal", value: .number(5_000), units: "steps", createdAt: day)],
            userInfo: ["source": "test"],
            createdAt: day,
            updatedAt: later
        )
    }

    static func outcome() -> Outcome {
        Outcome(
            activityID: "walk",
            occurrence: 4,
            values: [OutcomeValue(id: "v1", value: .boolean(true), createdAt: day)],
            removedValueIDs: ["gone"],
            note: "fine",
            createdAt: day,
            updatedAt: later
        )
    }

    /// The payload JSON of `record` as a dictionary, to take fields out of.
    static func json(_ record: CareRecord) throws -> [String: Any] {
        let f = try EnvelopeFixture()
        let type = record.type
        let sealed = try Envelope.seal(record: record, type: type, header: f.header(type), key: f.tresor.currentKey, author: f.patient.signing)
        let bytes = try sealed.open(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey)
        return try JSONSerialization.jsonObject(with: Data(bytes)) as! [String: Any]
    }

    /// Seals `payload` as raw bytes and opens it through every check of §4.4.
    static func open(_ payload: [String: Any], type: RecordType) throws -> CareRecord? {
        let f = try EnvelopeFixture()
        let bytes = Array(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys]))
        let sealed = try Envelope.seal(payload: bytes, header: f.header(type), key: f.tresor.currentKey, author: f.patient.signing)
        return try sealed.openRecord(keys: f.tresor.keys, authorKey: f.patient.signing.publicKey, expecting: f.context).record
    }

    /// `payload` with `path` (keys into nested objects, an index into an array) changed by `edit`.
    static func editing(_ payload: [String: Any], _ path: [Any], _ edit: (inout [String: Any]) -> Void) -> [String: Any] {
        guard let head = path.first else {
            var copy = payload
            edit(&copy)
            return copy
        }
        var copy = payload
        let key = head as! String
        if let index = path.dropFirst().first as? Int {
            var list = copy[key] as! [[String: Any]]
            list[index] = editing(list[index], Array(path.dropFirst(2)), edit)
            copy[key] = list
        } else {
            copy[key] = editing(copy[key] as! [String: Any], Array(path.dropFirst()), edit)
        }
        return copy
    }

    @Test func anActivityWithoutItsOptionalFieldsOpensWithTheDefaults() throws {
        let full = try Self.json(.activity(try Self.activity()))
        let cases: [([Any], String, (inout Activity) -> Void)] = [
            (["activity"], "schedule", { $0.schedule = Schedule(elements: []) }),
            (["activity"], "targetValues", { $0.targetValues = [] }),
            (["activity"], "userInfo", { $0.userInfo = [:] }),
            (["activity"], "createdAt", { $0.createdAt = Self.later }),
            (["activity"], "updatedAt", { $0.updatedAt = Self.day }),
            (["activity", "schedule", "elements", 0], "timeZoneIdentifier", { $0.schedule.elements[0].timeZoneIdentifier = "UTC" }),
            (["activity", "schedule", "elements", 0], "targetValues", { $0.schedule.elements[0].targetValues = [] }),
            (["activity", "schedule", "elements", 0], "allDay", { $0.schedule.elements[0].allDay = false }),
            (["activity", "schedule", "elements", 0], "duration", { $0.schedule.elements[0].duration = 0 }),
        ]
        for (path, key, expected) in cases {
            let payload = Self.editing(full, path) { $0.removeValue(forKey: key) }
            var want = try Self.activity()
            expected(&want)
            #expect(try Self.open(payload, type: .activity) == .activity(want), "without \(key)")
        }
        let neither = Self.editing(full, ["activity"]) {
            $0.removeValue(forKey: "createdAt")
            $0.removeValue(forKey: "updatedAt")
        }
        guard case let .activity(a)? = try Self.open(neither, type: .activity) else { throw Failure("not an activity") }
        #expect(a.createdAt == Date(timeIntervalSince1970: 0) && a.updatedAt == a.createdAt)
    }

    @Test func anOutcomeAndItsValuesWithoutOptionalFieldsOpenWithTheDefaults() throws {
        let full = try Self.json(.outcome(Self.outcome()))
        let cases: [([Any], String, (inout Outcome) -> Void)] = [
            (["outcome"], "removedValueIDs", { $0.removedValueIDs = [] }),
            (["outcome"], "values", { $0.values = [] }),
            (["outcome"], "createdAt", { $0.createdAt = Self.later }),
            (["outcome", "values", 0], "createdAt", { $0.values[0].createdAt = Date(timeIntervalSince1970: 0) }),
        ]
        for (path, key, expected) in cases {
            var want = Self.outcome()
            expected(&want)
            #expect(try Self.open(Self.editing(full, path) { $0.removeValue(forKey: key) }, type: .outcome) == .outcome(want), "without \(key)")
        }
        // A value without an id gets one derived from its content: the same on every reader and every read.
        let noID = Self.editing(full, ["outcome", "values", 0]) { $0.removeValue(forKey: "id") }
        guard case let .outcome(o)? = try Self.open(noID, type: .outcome), case let .outcome(again)? = try Self.open(noID, type: .outcome) else {
            throw Failure("not an outcome")
        }
        let derived = OutcomeValue.derivedID(value: .boolean(true), units: nil, kind: nil, createdAt: Self.day)
        #expect(o.values.map(\.id) == [derived] && again == o)
        #expect(derived.hasPrefix("h-") && derived.count == 34)
        // Different content, a different id; so a merge keeps two readings that lacked ids apart.
        #expect(OutcomeValue.derivedID(value: .boolean(false), units: nil, kind: nil, createdAt: Self.day) != derived)
        #expect(OutcomeValue.derivedID(value: .boolean(true), units: nil, kind: "x", createdAt: Self.day) != derived)
        #expect(OutcomeValue.derivedID(value: .boolean(true), units: nil, kind: nil, createdAt: Self.later) != derived)
        #expect(
            OutcomeValue.derivedID(value: .number(0), units: nil, kind: nil, createdAt: Self.day)
                != OutcomeValue.derivedID(value: .number(-0.0), units: nil, kind: nil, createdAt: Self.day)
        )
    }

    @Test func requiredFieldsStillRefuseAndUnknownFieldsAreIgnored() throws {
        let activity = try Self.json(.activity(try Self.activity()))
        for key in ["id", "title", "category"] {
            #expect(throws: EnvelopeError.self) {
                try Self.open(Self.editing(activity, ["activity"]) { $0.removeValue(forKey: key) }, type: .activity)
            }
        }
        for key in ["start", "interval"] {
            let payload = Self.editing(activity, ["activity", "schedule", "elements", 0]) { $0.removeValue(forKey: key) }
            #expect(throws: EnvelopeError.self) { try Self.open(payload, type: .activity) }
        }
        let outcome = try Self.json(.outcome(Self.outcome()))
        for key in ["activityID", "occurrence"] {
            #expect(throws: EnvelopeError.self) { try Self.open(Self.editing(outcome, ["outcome"]) { $0.removeValue(forKey: key) }, type: .outcome) }
        }
        #expect(throws: EnvelopeError.self) {
            try Self.open(Self.editing(outcome, ["outcome", "values", 0]) { $0.removeValue(forKey: "value") }, type: .outcome)
        }
        // A time zone this system does not know is still refused, also when the default would have fit.
        let unknownZone = Self.editing(activity, ["activity", "schedule", "elements", 0]) { $0["timeZoneIdentifier"] = "Mars/Olympus" }
        #expect(throws: EnvelopeError.self) { try Self.open(unknownZone, type: .activity) }
        // Unknown fields, at any level, are ignored by today's readers.
        var extra = Self.editing(activity, ["activity"]) { $0["futureField"] = ["x": 1] }
        extra = Self.editing(extra, ["activity", "schedule", "elements", 0]) { $0["rrule"] = "FREQ=DAILY" }
        extra["envelopeHint"] = true
        #expect(try Self.open(extra, type: .activity) == .activity(try Self.activity()))
    }
}

/// A test failure with a message.
struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension EnvelopeFixture {
    /// The fixture's header for a live record of `type`.
    func header(_ type: RecordType) -> RecordHeader {
        var h = header
        h.recordType = type
        return h
    }
}
