import Foundation
import Testing

@testable import VaultCLI

@Suite("Output safety")
struct OutputTests {
    @Test func terminalTextCannotCarryEscapeSequences() {
        let hostile = "Walk\u{1B}[2J\u{1B}]0;pwned\u{07}\nnext"
        let safe = Output.printable(hostile)
        #expect(!safe.unicodeScalars.contains { $0.properties.generalCategory == .control })
        #expect(safe.contains("Walk") && safe.contains("next"))
    }

    @Test func jsonTextEscapesWhatATerminalWouldObeyAndPassesTheRest() throws {
        let plain = Data(#"{"title" : "Walk \u001b[2J", "note" : "ok"}"#.utf8)
        #expect(Output.jsonText(plain) == String(decoding: plain, as: UTF8.self), "ASCII below DEL passes unchanged")
        let hostile = Data("{\"t\" : \"a\u{7F}b\u{85}c\u{202E}d\u{2028}e é 🙂\"}".utf8)
        #expect(Output.jsonText(hostile) == #"{"t" : "a\u007Fb\u0085c\u202Ed\u2028e é 🙂"}"#)
        let decoded = try JSONSerialization.jsonObject(with: Data(Output.jsonText(hostile).utf8)) as? [String: String]
        #expect(decoded == ["t": "a\u{7F}b\u{85}c\u{202E}d\u{2028}e é 🙂"], "the escapes read back as the same text")
    }

    @Test func csvCellsCannotBecomeFormulas() {
        #expect(CSVExport.cell("=HYPERLINK(\"http://x\")") == "\"'=HYPERLINK(\"\"http://x\"\")\"")
        #expect(CSVExport.cell("@SUM(A1)") == "\"'@SUM(A1)\"")
        #expect(CSVExport.cell("-3.5") == "\"-3.5\"", "negative numbers stay numbers")
        #expect(CSVExport.cell("plain") == "\"plain\"")
    }
}
