import Foundation

extension Routes {
    /// The live event stream (Server-Sent Events, Docs/events.md).
    public static let events = "/v1/events"
}

/// The names and limits of the event stream (Docs/events.md §2, §3), shared by the server that writes it
/// and the client that reads it.
public enum LiveEvent {
    /// The event names a client acts on; any other name is ignored.
    public enum Name: String, Sendable, CaseIterable {
        case ready, change, share, account, resync
    }

    /// The longest `Last-Event-ID` the server accepts and a client keeps.
    public static let maxIDBytes = 64
    /// The longest line a client reads; a longer one ends the connection.
    public static let maxLineBytes = 4_096
    /// The longest event (all its lines) a client reads.
    public static let maxEventBytes = 8_192
    /// The server writes a heartbeat at least this often.
    public static let heartbeatInterval: Duration = .seconds(15)
    /// A client that reads nothing for this long reconnects.
    public static let silenceLimit: Duration = .seconds(45)

    /// Whether `id` is an id a client may keep: 1 to 64 bytes of `0-9 a-z -`.
    public static func isValidID(_ id: String) -> Bool {
        let bytes = id.utf8
        return !bytes.isEmpty && bytes.count <= maxIDBytes
            && bytes.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x7A).contains($0) || $0 == 0x2D }
    }
}

/// `change`: records of an owner the caller reads changed; the owner's newest stored sequence on the owner's
/// own stream, 0 on a doctor's (a doctor is not told how many changes the patient made in categories it does
/// not hold). Absent is read as unknown.
public struct ChangeEventData: Codable, Sendable, Equatable {
    public var owner: UUID
    public var sequence: UInt64?
    public init(owner: UUID, sequence: UInt64?) {
        self.owner = owner
        self.sequence = sequence
    }
}

/// `share`: a share the subscriber is party to, in its new state, and the share's patient (absent from
/// servers before it was added; a client then re-reads all of its shares).
public struct ShareEventData: Codable, Sendable, Equatable {
    public var share: UUID
    public var state: String
    public var patient: UUID?
    public init(share: UUID, state: String, patient: UUID? = nil) {
        self.share = share
        self.state = state
        self.patient = patient
    }
}

/// `account` (the stream ends after it) and `resync`: why.
public struct ReasonEventData: Codable, Sendable, Equatable {
    public var reason: String
    public init(reason: String) { self.reason = reason }
}
