import ArgumentParser
import Logging

// Libraries log to stderr only, and only warnings: with --json, stdout carries nothing but the JSON object.
LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = .warning
    return handler
}

// Parsed and run by hand: in top-level code a bare `BenchCommand.main()` (and `run()` on the parsed
// command) resolves to the synchronous `ParsableCommand` entry point, which would only print the help.
do {
    let command = try BenchCommand.parse()
    try await command.execute()
} catch {
    BenchCommand.exit(withError: error)
}
