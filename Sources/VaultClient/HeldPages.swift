import Foundation
import Synchronization
import VaultCore

/// The pages before a doctor's final page of a pull, held in memory instead of in `pending_records`
/// (Docs/commitment-pages.md §8): every check but the signature passed, never shown, never written until
/// the final page's commitment authenticates them (then they are written once, as heads) or sends them to
/// the per-record check. What a pull holds here stays within `budget` bytes of envelopes; a page that
/// would pass it, or that holds a change that failed a check, is written pending with everything held
/// before it and the cursor of that page, as the path without this buffer does, and so is every later
/// page of that pull (a large pull writes as it goes instead of in bursts of the budget). A pull that ends without
/// its final page drops what is held here: the share's cursor never moved past it, so the next pull
/// fetches those pages again.
final class HeldPages: Sendable {
    /// How many bytes one pull holds in memory before it writes its pages pending: 16 MiB, each entry
    /// counted as its envelope and `entryOverhead` (the pages of about 16,000 records of 500 B, whose
    /// envelopes take 750 bytes, or of 1,000 of 16 KiB; Docs/benchmarks.md §3 has the measurements behind
    /// the choice). Tests set 0 to write every page.
    @TaskLocal static var budget = 16 * 1024 * 1024

    /// What an entry holds besides its envelope (its header, version id and the containers), counted with it.
    static let entryOverhead = 256

    private struct Held {
        var entries: [DoctorCache.Entry] = []
        var bytes = 0
        /// The sum of the head elements of `entries` (nil once a page came without its own).
        var added: LtHash? = LtHash()
        /// This pull passed the budget once: it holds nothing any more.
        var spilled = false
    }

    private let held = Mutex(Held())

    /// The entries held, in sequence order, and the sum of their head elements (`SharedPage.added`; nil
    /// when a page was held without it), taken out in one step: nothing is held after it (a page added
    /// meanwhile could otherwise be dropped). An applier serves one pull at a time; the engine runs one
    /// store at a time.
    func drain() -> (entries: [DoctorCache.Entry], added: LtHash?) {
        held.withLock { held in
            defer { held = Held(spilled: held.spilled) }
            return (held.entries, held.added)
        }
    }

    /// Holds a page's changes, with `added` the sum of their head elements when worked out: nil when they
    /// are kept in memory; otherwise everything held and the page's changes, to be written pending now
    /// (nothing is held after that), with the sum of all their head elements when every page had its own.
    func add(_ items: [DoctorCache.Pulled], added: LtHash? = nil) -> (items: [DoctorCache.Pulled], added: LtHash?)? {
        let budget = Self.budget
        var entries: [DoctorCache.Entry] = []
        var bytes = 0
        var failed = false
        for item in items {
            switch item {
            case let .verified(entry):
                entries.append(entry)
                bytes += entry.bytes.count + Self.entryOverhead
            case .failed: failed = true
            }
        }
        return held.withLock { held in
            if !failed, !held.spilled, held.bytes + bytes <= budget {
                held.entries += entries
                held.bytes += bytes
                held.added = held.added.flatMap { sum in added.map(sum.adding) }
                return nil
            }
            let out = held.entries.map(DoctorCache.Pulled.verified) + items
            let sum = held.added.flatMap { sum in added.map(sum.adding) }
            held = Held(spilled: true)
            return (out, sum)
        }
    }

    /// Whether this pull passed the budget: its pages are written pending from then on, and the sums of
    /// their heads are worked out in the store's transaction instead (`SharedPage.summed`), unless they
    /// are to be parked.
    var spilled: Bool { held.withLock(\.spilled) }

    /// Drops everything held: a pull begins, ends, or stored what it held.
    func clear() { held.withLock { $0 = Held() } }
}
