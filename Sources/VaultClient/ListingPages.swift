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

    /// The items of every page from the first: `fetch` reads the page after a cursor (nil: the first),
    /// until one says it is `done` or holds nothing.
    static func all<Page: Sendable, Item>(
        isolation: isolated (any Actor)? = #isolation,
        fetch: (String?) async throws -> Page,
        items: (Page) -> [Item],
        next: (Page) -> String?,
        done: (Page) -> Bool
    ) async throws -> [Item] {
        var out: [Item] = []
        var cursor: String?
        while true {
            let page = try await fetch(cursor)
            let got = items(page)
            out += got
            if done(page) || got.isEmpty { return out }
            try requireProgress(from: cursor, to: next(page))
            cursor = next(page)
        }
    }

    /// The query of one page: `after` (when there is one) and `limit`.
    static func query(after: String?, limit: Int) -> String {
        (after.map { "after=\($0)&" } ?? "") + "limit=\(limit)"
    }
}
