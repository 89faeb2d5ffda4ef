import Foundation

/// CPU-bound work spread over every core: signature checks and decryption of whole pages, on the
/// server (push) and in clients (pull, doctor views).
public enum Parallel {
    /// `transform` applied to every element, in order, in chunks of at least `minChunk` elements run
    /// concurrently, four chunks per core: a thread held by other work meanwhile (a client's database
    /// write, another request) leaves its share to the threads that are free instead of finishing last.
    /// The first error thrown is rethrown.
    public static func map<T: Sendable, U: Sendable>(
        _ items: [T],
        minChunk: Int = 64,
        _ transform: @escaping @Sendable (T) throws -> U
    ) async throws -> [U] {
        let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
        let chunk = max(minChunk, (items.count + 4 * workers - 1) / (4 * workers))
        if items.count <= chunk { return try items.map(transform) }
        return try await withThrowingTaskGroup(of: (Int, [U]).self) { group in
            for start in stride(from: 0, to: items.count, by: chunk) {
                let part = items[start..<min(start + chunk, items.count)]
                group.addTask { (start, try part.map(transform)) }
            }
            var parts: [(Int, [U])] = []
            for try await part in group { parts.append(part) }
            return parts.sorted { $0.0 < $1.0 }.flatMap(\.1)
        }
    }
}
