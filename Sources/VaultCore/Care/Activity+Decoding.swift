import Foundation

extension Activity {
    private enum Keys: String, CodingKey {
        case id, title, instructions, category, schedule, targetValues, carePlanID, userInfo, createdAt, updatedAt
    }

    /// Decodes an activity, giving absent optional-by-default fields the defaults of Docs/payload-v1.md §2
    /// (no schedule, no target values, no extra fields; `createdAt` and `updatedAt` each default to the
    /// other, and to 1970-01-01 when both are absent), so a record written by another client that left
    /// them out still opens, the same way on every device. `id`, `title` and `category` stay required.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        id = try c.decode(String.self, forKey: .id)
        title = try c.decode(String.self, forKey: .title)
        instructions = try c.decodeIfPresent(String.self, forKey: .instructions)
        category = try c.decode(String.self, forKey: .category)
        schedule = try c.decodeIfPresent(Schedule.self, forKey: .schedule) ?? Schedule(elements: [])
        targetValues = try c.decodeIfPresent([OutcomeValue].self, forKey: .targetValues) ?? []
        carePlanID = try c.decodeIfPresent(String.self, forKey: .carePlanID)
        userInfo = try c.decodeIfPresent([String: String].self, forKey: .userInfo) ?? [:]
        (createdAt, updatedAt) = try Self.decodeDates(c, created: .createdAt, updated: .updatedAt)
    }

    /// An activity as decoding gives it, not validated: for the direct payload reader (`PayloadParser`),
    /// which must give what `init(from:)` gives.
    init(
        decoded id: String,
        title: String,
        instructions: String?,
        category: String,
        schedule: Schedule,
        targetValues: [OutcomeValue],
        carePlanID: String?,
        userInfo: [String: String],
        createdAt: Date,
        updatedAt: Date
    ) {
        self.id = id
        self.title = title
        self.instructions = instructions
        self.category = category
        self.schedule = schedule
        self.targetValues = targetValues
        self.carePlanID = carePlanID
        self.userInfo = userInfo
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    /// The creation and change dates, each defaulting to the other and both to 1970-01-01.
    static func decodeDates<K: CodingKey>(_ c: KeyedDecodingContainer<K>, created: K, updated: K) throws -> (Date, Date) {
        resolvedDates(created: try c.decodeIfPresent(Date.self, forKey: created), updated: try c.decodeIfPresent(Date.self, forKey: updated))
    }

    /// The creation and change dates given (each may be absent), each defaulting to the other and both to 1970-01-01.
    static func resolvedDates(created: Date?, updated: Date?) -> (Date, Date) {
        let fallback = Date(timeIntervalSince1970: 0)
        return (created ?? updated ?? fallback, updated ?? created ?? fallback)
    }
}
