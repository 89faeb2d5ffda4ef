import Foundation

/// CPU-bound work spread over every core: signature checks and decryption of whole pages, on the
/// server (push) and in clients (pull, doctor views).
public enum Parallel {
    /// The ranges `map` splits `count` items into: at least `minChunk` each, four per core, in order.
    public static func chunks(_ count: Int, minChunk: Int = 64) -> [Range<Int>] {
        let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
        let chunk = max(1, minChunk, (count + 4 * workers - 1) / (4 * workers))
        return stride(from: 0, to: count, by: chunk).map { $0..<min($0 + chunk, count) }
    }

    /// `transform` applied to every element, in order, in chunks of at least `minChunk` elements run
    /// concurrently, four chunks per core: a thread held by other work meanwhile (a client's database
    /// write, another request) leaves its share to the threads that are free instead of finishing last.
    /// The first error thrown is rethrown.
    public static func map<T: Sendable, U: Sendable>(
        _ items: [T],
        minChunk: Int = 64,
        _ transform: @escaping @Sendable (T) throws -> U
    ) async throws -> [U] {
        let ranges = chunks(items.count, minChunk: minChunk)
        if ranges.count <= 1 { return try items.map(transform) }
        return try await withThrowingTaskGroup(of: (Int, [U]).self) { group in
            for range in ranges {
                let part = items[range]
                group.addTask { (range.lowerBound, try part.map(transform)) }
            }
            var parts: [(Int, [U])] = []
            for try await part in group { parts.append(part) }
            return parts.sorted { $0.0 < $1.0 }.flatMap(\.1)
        }
    }
}
