import CAllocator
import Foundation
import Testing

/// The cap on glibc's allocator arenas that each tool and the server set when they start (`ToolRunner.main`,
/// `CareVaultServer.run`; Docs/benchmarks.md §5 and §7). The memory it saves is measured by the bench.
@Suite("Tools: the allocator's arenas")
struct AllocatorTests {
    @Test func theCapIsSetOnGlibcUnlessTheEnvironmentSetsIt() {
        let set = carevault_limit_malloc_arenas(2)
        #if canImport(Glibc)
        #expect(set == (ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] == nil ? 1 : 0))
        #else
        #expect(set == 0, "only glibc has the cap")
        #endif
    }
}
