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

    @Test func csvCellsCannotBecomeFormulas() {
        #expect(CSVExport.cell("=HYPERLINK(\"http://x\")") == "\"'=HYPERLINK(\"\"http://x\"\")\"")
        #expect(CSVExport.cell("@SUM(A1)") == "\"'@SUM(A1)\"")
        #expect(CSVExport.cell("-3.5") == "\"-3.5\"", "negative numbers stay numbers")
        #expect(CSVExport.cell("plain") == "\"plain\"")
    }
}
