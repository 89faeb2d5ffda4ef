import Foundation
import Testing
import VaultAPI
import VaultCrypto

/// The push answer written and read directly (PushResponse+Direct) against Foundation's coders: the server's
/// direct bytes must be the bytes its `JSONEncoder` writes, and the client's direct reading must be what
/// `JSONDecoder` reads, or nothing (then `JSONDecoder` decides).
@Suite("Push answers written and read directly")
struct PushAnswerTests {
    /// The server's JSON configuration (VaultResponseEncoder.json).
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    static func answer(_ count: Int, seed: UInt64) -> PushResponse {
        var g = SeededGenerator(seed: seed)
        return PushResponse(
            results: (0..<count).map { i in
                let id = Hex.encode(RandomBytes.bytes(count: 32))
                switch g.next() % 3 {
                case 0: return PushResult(versionID: id, status: .stored, sequence: g.next() % 2 == 0 ? UInt64(i) : g.next())
                case 1: return PushResult(versionID: id, status: .stored)
                default: return PushResult(versionID: id, status: .duplicate)
                }
            }
        )
    }

    /// Nil when the direct reading gave up; else whether it is what JSONDecoder reads.
    static func agrees(_ bytes: [UInt8]) -> Bool? {
        guard let direct = PushResponse.direct(from: bytes) else { return nil }
        guard let reference = try? JSONDecoder().decode(PushResponse.self, from: Data(bytes)) else { return false }
        return direct.results == reference.results
    }

    @Test func theServersDirectBytesAreTheEncodersBytes() throws {
        for (count, seed) in [(0, 1), (1, 2), (500, 3), (37, 4)] {
            let answer = Self.answer(count, seed: UInt64(seed))
            let direct = try #require(answer.directJSON())
            #expect(direct == Array(try Self.encoder.encode(answer)))
            #expect(Self.agrees(direct) == true, "the client reads what the server wrote directly")
        }
    }

    @Test func aRefusalOrAnUnusualVersionIDIsLeftToTheEncoder() {
        let id = String(repeating: "a", count: 64)
        for result in [
            PushResult(versionID: id, status: .rejected, code: .invalidSignature, reason: "does not verify"),
            PushResult(versionID: "a/b", status: .stored, sequence: 1),
            PushResult(versionID: "a\"b", status: .stored),
            PushResult(versionID: "é", status: .duplicate),
        ] {
            #expect(PushResponse(results: [PushResult(versionID: id, status: .stored, sequence: 9), result]).directJSON() == nil)
        }
    }

    @Test(arguments: [
        (#" { "results" : [ { "versionID" : "ab" , "sequence" : 0 , "status" : "stored" } ] } "#, true),
        (#"{"results":[{"status":"duplicate","versionID":"ab"}]}"#, true),
        (#"{"results":[]}"#, true),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":18446744073709551615}]}"#, true),
        // Left to JSONDecoder.
        (#"{"results":[{"status":"rejected","versionID":"ab","code":"invalid_signature","reason":"no"}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":null}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":1.0}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":-1}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":18446744073709551616}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":0123}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":-0}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","sequence":1,"sequence":2}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab","versionID":"cd"}]}"#, false),
        (#"{"results":[],"results":[]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"a\u0062"}]}"#, false),
        (#"{"results":[{"status":"stored","status":"duplicate","versionID":"ab"}]}"#, false),
        (#"{"results":[],"more":1}"#, false),
        (#"{"results":[{"status":"lost","versionID":"ab"}]}"#, false),
        (#"{"results":[{"status":"stored"}]}"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab"}]} ]"#, false),
        (#"{"results":[{"status":"stored","versionID":"ab"},]}"#, false),
        (#"{}"#, false),
        ("", false),
    ])
    func edgesAgreeWithFoundation(json: String, readDirectly: Bool) {
        let verdict = Self.agrees(Array(json.utf8))
        #expect(verdict != false, "the direct reading disagrees with JSONDecoder")
        #expect((verdict != nil) == readDirectly)
    }

    /// Bytes changed, inserted, deleted and repeated at random in answers: the direct reading gives up or agrees.
    @Test func mutatedAnswersAreNeverReadDifferently() throws {
        var g = SeededGenerator(seed: 11)
        let alphabet = Array(#"{}[],:"\-.0123456789eE+ ntfusqdabx"#.utf8) + [0x00, 0x1F, 0xC3, 0xFF]
        let base = try #require(Self.answer(4, seed: 5).directJSON())
        var direct = 0
        for round in 0..<6_000 {
            var bytes = base
            for _ in 0...(g.next() % 3) {
                guard !bytes.isEmpty else { break }
                let at = Int(g.next() % UInt64(bytes.count))
                switch g.next() % 4 {
                case 0: bytes[at] = alphabet[Int(g.next() % UInt64(alphabet.count))]
                case 1: bytes.insert(alphabet[Int(g.next() % UInt64(alphabet.count))], at: at)
                case 2: bytes.remove(at: at)
                default:
                    let end = min(bytes.count, at + 1 + Int(g.next() % 24))
                    bytes.insert(contentsOf: bytes[at..<end], at: end)
                }
            }
            switch Self.agrees(bytes) {
            case true?: direct += 1
            case false?: Issue.record("round \(round): the direct reading disagrees with JSONDecoder on \(String(decoding: bytes, as: UTF8.self))")
            case nil: break
            }
        }
        #expect(direct > 100)
    }
}
