import Foundation
import VaultAPI

/// Following every page of a listing paged by an id cursor (`GET /v1/admin/users`, `/v1/admin/pending`,
/// `/v1/doctor/patients`, `/v1/sessions`; Docs/design.md §6.1). A page that says it is not the last
/// must move its cursor past the one sent: a server that does not is refused (`ClientError.integrity`)
/// rather than asked again forever.
enum ListingPages {
    /// A UUID cursor in the order the server pages by: its lower-case text (the byte order of the id).
    static func key(_ id: UUID?) -> String? { id.map { $0.uuidString.lowercased() } }

    /// Throws unless `next` lies beyond `cursor` (any cursor lies beyond the first page's none).
    static func requireProgress(from cursor: String?, to next: String?) throws {
        guard let next, cursor.map({ next > $0 }) ?? true else {
            throw ClientError.integrity("the server's pages do not advance (a page that is not the last repeats its cursor)")
        }
    }

    /// The most pages and items one listing is read to: a server whose pages advance but never end (a cursor
    /// moved by one each time) is refused here instead of filling the tool's memory.
    static let maxPages = 10_000
    static let maxItems = 500_000

    /// Throws once a listing went past `maxPages` pages or `maxItems` items.
    static func requireBounded(pages: Int, items: Int) throws {
        guard pages <= maxPages, items <= maxItems else {
            throw ClientError.integrity("the server's listing does not end (more than \(maxPages) pages or \(maxItems) items)")
        }
    }

    /// The items of every page from the first: `fetch` reads the page after a cursor (nil: the first),
    /// until one says it is `done`. A page that is not the last may be empty (the server passed over rows
    /// it does not show), but its cursor must still move forward.
    static func all<Page: Sendable, Item>(
        isolation: isolated (any Actor)? = #isolation,
        fetch: (String?) async throws -> Page,
        items: (Page) -> [Item],
        next: (Page) -> String?,
        done: (Page) -> Bool
    ) async throws -> [Item] {
        var out: [Item] = []
        var cursor: String?
        var pages = 0
        while true {
            let page = try await fetch(cursor)
            out += items(page)
            pages += 1
            try requireBounded(pages: pages, items: out.count)
            if done(page) { return out }
            try requireProgress(from: cursor, to: next(page))
            cursor = next(page)
        }
    }

    /// The query of one page: `after` (when there is one) and `limit`.
    static func query(after: String?, limit: Int) -> String {
        (after.map { "after=\($0)&" } ?? "") + "limit=\(limit)"
    }
}
