import Foundation
import VaultAPI
import VaultCore

/// JSON for the columns that hold signed statements. Sorted keys so equal values store equal text.
enum RowJSON {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    static func encode<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ text: String) throws -> T {
        try JSONDecoder().decode(T.self, from: Data(text.utf8))
    }

    static func decodeOptional<T: Decodable>(_ type: T.Type, _ text: String?) throws -> T? {
        guard let text else { return nil }
        return try decode(T.self, text)
    }
}

/// Builds audit entries for a batch of events, chained onto the given head.
enum AuditBuilder {
    static func entries(for events: [AuditEvent], after head: (sequence: UInt64, hash: String), now: UnixMillis) -> [AuditEntry] {
        var previous = head.hash
        var sequence = head.sequence
        return events.map { e in
            sequence += 1
            let hash = AuditChain.hash(sequence: sequence, at: now, actor: e.actor, action: e.action, patientID: e.patientID,
                                       details: e.details, previousHash: previous)
            defer { previous = hash }
            return AuditEntry(sequence: sequence, at: now, actor: e.actor, action: e.action, patientID: e.patientID,
                              details: e.details, previousHash: previous, hash: hash)
        }
    }
}

/// The one schema both backends create (column types differ only where the engines do).
enum Schema {
    static let shareStates = ShareState.allCases.map { "'\($0.rawValue)'" }.joined(separator: ",")
}
