import Foundation
import VaultCore

/// The media types of the binary record bodies (Docs/envelope-v1.md §7.2, §7.3). A push sends a batch
/// (`Content-Type`) and a pull asks for a page (`Accept`); the records route takes no other (415, 406).
/// Every other route is JSON.
public enum RecordMediaType {
    /// A push batch, `"CVF" 0x01 …` (§7.2).
    public static let batch = "application/vnd.carevault.batch"
    /// A pull page, `"CVP" 0x01 …` (§7.3).
    public static let page = "application/vnd.carevault.page"
    /// Every other body.
    public static let json = "application/json"

    /// True when an `Accept` value lets the answer be `type`: no header at all (HTTP: any type), a range
    /// that covers it (`*/*`, `application/*`), or `type` itself.
    public static func accepts(_ header: String?, _ type: String) -> Bool {
        guard let header else { return true }
        let main = type.split(separator: "/").first.map { "\($0)/*" } ?? type
        return names(header, type) || names(header, "*/*") || names(header, main)
    }

    /// True when a `Content-Type` value names `type` (parameters such as `; charset` ignored).
    public static func names(_ header: String?, _ type: String) -> Bool {
        guard let header else { return false }
        return header.split(separator: ",").contains { part in
            part.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() == type } ?? false
        }
    }
}

/// The byte bound of a pull page (Docs/envelope-v1.md §7.3), asked for with `maxBytes` in the query.
public enum PullPageBytes {
    /// The bound when the query names none: 4 MiB, a few seconds on a slow link.
    public static let `default` = 4 * 1024 * 1024
    /// The least a client may ask for.
    public static let minimum = 64 * 1024
    /// The most a client may ask for: half a frame's limit, leaving room for one record past the bound
    /// (a page always holds at least one change) and for the commitments.
    public static let maximum = PullPageFrame.maxBytes / 2

    /// `requested` (the default when nil) held between `minimum` and `maximum`.
    public static func clamped(_ requested: Int?) -> Int { min(max(requested ?? `default`, minimum), maximum) }
}
