import VaultAPI

/// A Server-Sent Events parser for bytes that may be crafted (Docs/events.md §2): lines end with LF, CRLF
/// or CR; a line longer than `LiveEvent.maxLineBytes` or an event longer than `LiveEvent.maxEventBytes`
/// is an error (the caller drops the connection); comments and unknown fields are skipped; an `id` that is
/// not 1 to 64 bytes of `0-9 a-z -` is ignored.
struct SSEParser {
    /// One dispatched event as it was framed; the name is `message` when none was given.
    struct Event: Sendable, Equatable {
        var id: String?
        var name: String
        var data: String
    }

    enum Failure: Error, Equatable {
        case lineTooLong
        case eventTooLong
    }

    private var line: [UInt8] = []
    private var afterCR = false
    private var eventBytes = 0
    private var name: String?
    private var data: [String] = []
    private var id: String?

    /// The events completed by `bytes`.
    mutating func feed(_ bytes: some Sequence<UInt8>) throws(Failure) -> [Event] {
        var out: [Event] = []
        for byte in bytes {
            if afterCR {
                afterCR = false
                if byte == 0x0A { continue }
            }
            switch byte {
            case 0x0A, 0x0D:
                afterCR = byte == 0x0D
                if let event = try endLine() { out.append(event) }
            default:
                guard line.count < LiveEvent.maxLineBytes else { throw .lineTooLong }
                line.append(byte)
            }
        }
        return out
    }

    private mutating func endLine() throws(Failure) -> Event? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty { return dispatch() }
        eventBytes += line.count + 1
        guard eventBytes <= LiveEvent.maxEventBytes else { throw .eventTooLong }
        if line.first == UInt8(ascii: ":") { return nil }
        let colon = line.firstIndex(of: UInt8(ascii: ":"))
        let field = String(decoding: line[..<(colon ?? line.endIndex)], as: UTF8.self)
        var value = colon.map { line[line.index(after: $0)...] } ?? []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        let text = String(decoding: value, as: UTF8.self)
        switch field {
        case "event": name = text
        case "data": data.append(text)
        case "id": if LiveEvent.isValidID(text) { id = text }
        default: break
        }
        return nil
    }

    private mutating func dispatch() -> Event? {
        defer {
            name = nil
            data = []
            id = nil
            eventBytes = 0
        }
        guard !data.isEmpty || name != nil else { return nil }
        return Event(id: id, name: name ?? "message", data: data.joined(separator: "\n"))
    }
}
