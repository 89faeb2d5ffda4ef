import ArgumentParser
import Foundation
import Logging

// The databases, key files and reports it writes are the operator's alone (0600, folders 0700).
umask(0o077)

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
