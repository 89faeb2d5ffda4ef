import Foundation

// The id-paged listings read a page without `done` (a server from before paging, which sent everything in one
// answer) as the last one (Docs/design.md §6.1). Encoding is the synthesized one.

extension PatientList {
    private enum Keys: String, CodingKey { case patients, nextCursor, done }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        self.init(
            patients: try c.decode([PatientSummary].self, forKey: .patients),
            nextCursor: try c.decodeIfPresent(UUID.self, forKey: .nextCursor),
            done: try c.decodeIfPresent(Bool.self, forKey: .done) ?? true
        )
    }
}

extension SessionList {
    private enum Keys: String, CodingKey { case sessions, nextCursor, done }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        self.init(
            sessions: try c.decode([SessionInfo].self, forKey: .sessions),
            nextCursor: try c.decodeIfPresent(String.self, forKey: .nextCursor),
            done: try c.decodeIfPresent(Bool.self, forKey: .done) ?? true
        )
    }
}

extension UserList {
    private enum Keys: String, CodingKey { case users, nextCursor, done }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        self.init(
            users: try c.decode([UserSummary].self, forKey: .users),
            nextCursor: try c.decodeIfPresent(UUID.self, forKey: .nextCursor),
            done: try c.decodeIfPresent(Bool.self, forKey: .done) ?? true
        )
    }
}

extension PendingResponse {
    private enum Keys: String, CodingKey { case registrations, shares, nextSequence, nextCursor, nextShareCursor, done }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        self.init(
            registrations: try c.decode([PendingRegistration].self, forKey: .registrations),
            shares: try c.decode([PendingShare].self, forKey: .shares),
            nextSequence: try c.decode(UInt64.self, forKey: .nextSequence),
            nextCursor: try c.decodeIfPresent(UUID.self, forKey: .nextCursor),
            nextShareCursor: try c.decodeIfPresent(UUID.self, forKey: .nextShareCursor),
            done: try c.decodeIfPresent(Bool.self, forKey: .done) ?? true
        )
    }
}
