import Foundation
import Testing
import VaultAPI

@testable import VaultClient

/// The event stream parser and the mapping of events to updates, fed crafted bytes (Docs/events.md §2).
@Suite("Event stream parser")
struct EventStreamParserTests {
    func parse(_ text: String) throws -> [SSEParser.Event] {
        var p = SSEParser()
        return try p.feed(Array(text.utf8))
    }

    @Test func framesEventsWithAnyLineEndingAndSkipsCommentsAndUnknownFields() throws {
        let events = try parse(": hb\n\nid: abc-1\nevent: change\ndata: {}\n\nretry: 1\r\nfoo: bar\r\nevent: ready\r\ndata: {}\r\r")
        #expect(events == [.init(id: "abc-1", name: "change", data: "{}"), .init(id: nil, name: "ready", data: "{}")])
        // Split anywhere, even between CR and LF, the same events come out.
        let text = "id: a-2\r\nevent: share\r\ndata: {\"x\":1}\r\n\r\n"
        var p = SSEParser()
        var out: [SSEParser.Event] = []
        for byte in Array(text.utf8) { out += try p.feed([byte]) }
        #expect(out == [.init(id: "a-2", name: "share", data: "{\"x\":1}")])
    }

    @Test func ignoresIDsThatAreNotShortLowercaseTokens() throws {
        for bad in ["", "UPPER-1", "a b", "x\u{0}y", String(repeating: "a", count: 65), "ü-1"] {
            #expect(try parse("id: \(bad)\nevent: ready\ndata: {}\n\n").first?.id == nil, "\(bad)")
        }
        #expect(try parse("id: \(String(repeating: "a", count: 64))\nevent: ready\ndata: {}\n\n").first?.id != nil)
    }

    @Test func refusesOverlongLinesAndEvents() throws {
        var p = SSEParser()
        #expect(throws: SSEParser.Failure.lineTooLong) { try p.feed(Array(repeating: UInt8(ascii: "a"), count: LiveEvent.maxLineBytes + 1)) }
        var q = SSEParser()
        let line = "data: " + String(repeating: "b", count: 1_000) + "\n"
        #expect(throws: SSEParser.Failure.eventTooLong) { try q.feed(Array(String(repeating: line, count: 9).utf8)) }
        // Many small comment lines count towards the event too, so a server cannot grow one without end.
        var r = SSEParser()
        #expect(throws: SSEParser.Failure.eventTooLong) {
            try r.feed(Array(String(repeating: ":\(String(repeating: "c", count: 100))\n", count: 100).utf8))
        }
    }

    @Test func garbageNeverCrashesAndYieldsNoKnownEventByChance() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var p = SSEParser()
            let bytes = (0..<512).map { _ in UInt8.random(in: 0...255, using: &generator) }
            for event in (try? p.feed(bytes)) ?? [] {
                // Whatever comes out is bounded and maps to an update or to nothing.
                #expect(event.data.utf8.count <= LiveEvent.maxEventBytes)
                _ = EventStream.update(event, resumed: false)
            }
        }
    }

    @Test func unknownEventsAreIgnoredAndUnreadableKnownOnesMeanResync() throws {
        let owner = UUID()
        #expect(EventStream.update(.init(id: nil, name: "message", data: "hi"), resumed: false) == nil)
        #expect(EventStream.update(.init(id: nil, name: "delete-everything", data: "{}"), resumed: false) == nil)
        #expect(EventStream.update(.init(id: nil, name: "ready", data: ""), resumed: true) == .ready(resumed: true))
        let change = "{\"owner\":\"\(owner.uuidString)\",\"sequence\":7}"
        #expect(EventStream.update(.init(id: nil, name: "change", data: change), resumed: false) == .change(owner: owner, sequence: 7))
        #expect(
            EventStream.update(.init(id: nil, name: "change", data: "{\"owner\":1}"), resumed: false) == .resync(reason: "unreadable change event")
        )
        let share = "{\"share\":\"\(owner.uuidString)\",\"state\":\"owned\"}"
        #expect(EventStream.update(.init(id: nil, name: "share", data: share), resumed: false) == .resync(reason: "unreadable share event"))
        let account = EventStream.update(.init(id: nil, name: "account", data: "{\"reason\":\"\u{1b}[2Jgone\"}"), resumed: false)
        guard case let .account(reason) = account else { throw ParserTestFailure("expected an account update") }
        #expect(!reason.contains("\u{1b}"), "a server's text is made safe to print")
    }
}

struct ParserTestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
