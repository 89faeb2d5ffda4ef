import Foundation
import Logging

/// `--log-format json`: one JSON object per line on standard error (`time`, `level`, `label`, `message`,
/// then the metadata), for log collectors. The server logs no bodies, tokens, passwords or keys; as a
/// second line of defence, metadata whose key names a secret is dropped here.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    /// Keys never written, whatever a library puts under them.
    static let secretKeys = ["authorization", "token", "password", "secret", "cookie", "key", "body"]
    static let lock = NSLock()

    init(label: String, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.metadataProvider = metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields = metadata.merging(metadataProvider?.get() ?? [:]) { _, new in new }
        fields.merge(event.metadata ?? [:]) { _, new in new }
        var object: [String: String] = [:]
        for (key, value) in fields where !Self.isSecret(key) { object[key] = "\(value)" }
        object["time"] = Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date())
        object["level"] = event.level.rawValue
        object["label"] = label
        object["message"] = "\(event.message)"
        Self.write(object)
    }

    static func isSecret(_ key: String) -> Bool {
        let k = key.lowercased()
        return secretKeys.contains { k.contains($0) }
    }

    /// One line per event; the lock keeps lines from interleaving between threads.
    static func write(_ object: [String: String]) {
        guard var line = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        line.append(0x0A)
        lock.lock()
        defer { lock.unlock() }
        FileHandle.standardError.write(line)
    }
}
